"""The license of each repository as an SPDX expression, on every one of its rows (`license`), and a recipe policy
over it, as The Stack keeps only permissively licensed repositories.

Per repository, once (not per file), the first of these that says something wins:
1. `metadata`: a non-null `license` value the input carried (The Stack's Parquet layout);
2. `license_file`: top-level LICENSE*/LICENCE*/COPYING*/UNLICENSE files, by full text (filters/license_match.py), by an
   SPDX id or short notice inside them; NOTICE files (attributions) and third-party ones (LICENSE.thirdparty,
   LICENSES.txt) are not the repository's license, nor is a LICENSE in a subfolder (vendored code);
3. `readme`: the license section of the top-level README (full text or notice);
4. `header`: `SPDX-License-Identifier:` lines and notices in the first lines of source files.
Several licenses found combine with OR where a text offers the choice ("dual licensed", "licensed under either of",
"at your option" outside a license text), else with AND (all apply; LICENSE-MIT beside LICENSE-APACHE without such words is "Apache-2.0 AND MIT"). A README
naming a license the license files do not hold is a conflict. The policy then allows an OR expression when one of
its licenses is allowed, an AND expression when all are, at any nesting (SPDX's grammar, parsed by license-expression),
and `A WITH exception` when A is (an exception only adds permissions).

Drops: `license/not_allowed`, `license/unknown` (nothing found), `license/conflicting`; the last two are kept only
with `keep_unknown`/`keep_conflicting`, whatever `allow` says (`allow: any` means any *known* license). Every
repository is a row of `OUT/repositories.parquet` (name, files, bytes, license, where it came from, stars, has_tests).
"""

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import PurePosixPath
from typing import Literal

import pyarrow as pa
from pydantic import Field, field_validator

from filters.base import Annotation, Stage, StageParams
from filters.code_filters import TEST_PATH
from filters.license_declared import MANIFESTS, declared_license
from filters.license_index import copyright_lines
from filters.license_match import (
    ABOUT_THE_TEXT, DUAL, MAX_REST_WORDS, UNKNOWN_RESTRICTION, LicenseMatcher, bsd_by_clauses, gnu_suffix, join, matcher, notice_text,
    restriction_left, says_or_later, spdx_ids, subsumes,
)

# licenses asking at most for attribution and the notice, no share-alike: the usual permissive software licenses
# (those The Stack keeps, and more that the Blue Oak Council rates permissive), and CC-BY for documentation; `allow:
# permissive` adds every licence ScanCode's LicenseDB files as Permissive or Public Domain (the index's `permissive`)
PERMISSIVE = (
    "MIT", "MIT-0", "Apache-2.0", "Apache-1.1", "BSD-2-Clause", "BSD-3-Clause", "BSD-3-Clause-Clear", "0BSD", "ISC",
    "Zlib", "BSL-1.0", "Unlicense", "CC0-1.0", "PSF-2.0", "Python-2.0", "HPND", "MIT-CMU", "X11", "NCSA", "PostgreSQL", "UPL-1.0",
    "WTFPL", "BlueOak-1.0.0", "Artistic-2.0", "AFL-3.0", "MS-PL", "ECL-2.0", "Unicode-3.0", "Unicode-DFS-2016",
    "bzip2-1.0.6", "curl", "libpng-2.0", "MulanPSL-2.0", "CC-BY-3.0", "CC-BY-4.0",
)  # fmt: skip
LICENSE_FILE = re.compile(r"^(?:un)?licen[cs]e|^copying", re.IGNORECASE)
# where a license file turns to the software a binary distribution bundles (numpy's and scipy's wheels append
# OpenBLAS's and the GCC runtime's licenses): what follows is others' code, not the repository's license
BUNDLED = re.compile(r"\b(?:bundles?|bundled with|ships with|includes) the following\b|^\W*third[- ]party (?:software|"
                     r"licenses|notices|components)\b|\bportions of this (?:module|project|software) are derived from\b"
                     r"|\bthis (?:project|product|software) includes (?:code|software)\b", re.IGNORECASE | re.MULTILINE)  # fmt: skip  # a heading: Apache-2.0's own text says "such third-party notices"
_BUNDLED_WORDS = re.compile(r"the following|third[- ]party|portions of this|includes (?:code|software)")  # BUNDLED's words, lower-case: a quick first pass
THIRD_PARTY = re.compile(r"third|external|vendor|bundled|^licen[cs]es", re.IGNORECASE)  # LICENSE.thirdparty, LICENSES.txt: others' code
README = re.compile(r"^readme(?:\.|$)", re.IGNORECASE)
_RULE_LINE = re.compile(r"^[-=*_]{10,}\s*$", re.MULTILINE)
_LICENSE_HEADING = re.compile(r"^(?:#+|=+|\.\. _)?\s*(?:licen[cs]e|licensing|copying)\b.*$", re.IGNORECASE | re.MULTILINE)
_HEADING = re.compile(r"^(?:#+\s|\S.*\n[=\-~]{3,}$)", re.MULTILINE)
HEADER_CHARS = 2000  # of each source file, for SPDX ids and notices in its header comment
IDENTIFIER_HEAD = 500  # of a license file: an SPDX-License-Identifier line there names the file's license; one further
# down belongs to code the file quotes (pyarrow's LICENSE.txt lists its bundled sources' identifiers)


class LicenseParams(StageParams):
    allow: Literal["permissive", "permissive-listed", "any"] | list[str] = Field(
        "permissive", description="'permissive': PERMISSIVE in filters/license.py and the licences ScanCode's LicenseDB files "
        "as Permissive or Public Domain, less those with an advertising clause or a field-of-use restriction "
        "(filters/license_database.restricted_ids: JSON, BSD-4-Clause, OpenSSL, ...); 'permissive-listed': PERMISSIVE "
        "alone; 'any' known license; or SPDX ids. OR is allowed when a branch is, AND when every part is, `A WITH "
        "exception` when A is",
    )
    prefer: Literal["files", "declared"] = Field(
        "files", description="when a package manifest (PKG-INFO, pyproject.toml, Cargo.toml, package.json) declares an SPDX "
        "expression and the licence files say something: 'files' (the legal text is what ships; a manifest's field is "
        "a claim that goes stale) or 'declared'; either way a difference is reported in license_evidence, and where no "
        "licence file names one the declaration wins over a README's or header's notice",
    )
    keep_unknown: bool = Field(False, description="keep repositories with no license found")
    keep_conflicting: bool = Field(False, description="keep repositories whose README and license files disagree")

    @field_validator("allow")
    @classmethod
    def known_ids(cls, allow: str | list[str]) -> str | list[str]:
        """A misspelt id would silently drop every repository under that license."""
        if isinstance(allow, list):
            unknown = [spdx for spdx in allow if spdx.lower() not in spdx_ids()]
            if unknown:
                raise ValueError(f"allow: {unknown} are not SPDX license ids (GNU ones end in -only or -or-later)")
            return [spdx_ids()[spdx.lower()] for spdx in allow]  # as the detector spells them: `mit` is `MIT`
        return allow


class LicenseFilter(Stage):
    name = "license"
    Params = LicenseParams
    requires = ("id", "text", "repository")  # and `path`, else the url's part after "<repository>/"
    adds = {"license": pa.string()}
    fills = ("license",)  # the source's license (package metadata) is one of its inputs; it writes the one it found
    per_document = False  # a repository's license is read off its license files, README and headers together
    report_name = "repositories"
    report_schema = pa.schema([
        ("repository", pa.string()), ("files", pa.int64()), ("bytes", pa.int64()), ("license", pa.string()),
        ("license_source", pa.string()), ("license_evidence", pa.string()), ("declared_license", pa.string()),
        ("stars", pa.int64()), ("has_tests", pa.bool_()),
    ])  # fmt: skip

    def setup(self) -> None:
        self.matcher = matcher()

    def allowed(self, expression: str) -> bool:
        return self.params.allow == "any" or expression_allowed(expression, self._allowed_ids)

    @cached_property
    def _allowed_ids(self) -> frozenset[str]:
        """Built once per stage, not per repository."""
        if self.params.allow == "permissive":
            return frozenset(PERMISSIVE) | matcher().index.permissive
        return frozenset(PERMISSIVE if self.params.allow == "permissive-listed" else self.params.allow)

    def annotate(self, table: pa.Table) -> Annotation:
        columns = {name: table[name].to_pylist() for name in ("repository", "text")}
        columns["path"] = table["path"].to_pylist() if "path" in table.column_names else _paths_from_urls(table, columns["repository"])
        given = table["license"].to_pylist() if "license" in table.column_names else [None] * table.num_rows
        stars = table["stars"].to_pylist() if "stars" in table.column_names else [None] * table.num_rows
        rows_of: dict[str, list[int]] = defaultdict(list)
        for row, repository in enumerate(columns["repository"]):
            rows_of[repository].append(row)
        reasons: list[str | None] = [None] * table.num_rows
        licenses: list[str | None] = [None] * table.num_rows
        report, per_license, documents = [], Counter(), Counter()
        for repository, rows in rows_of.items():
            paths = [columns["path"][row] or "" for row in rows]
            texts = [columns["text"][row] or "" for row in rows]
            metadata = next((given[row] for row in rows if given[row]), None)
            found = Detection(metadata, "metadata", f"license column: {metadata}") if metadata else detect(self.matcher, paths, texts)
            declared = None if metadata else declared_license(paths, texts)
            if declared:
                found = with_declared(found, *declared, self.params.prefer)
            if found.source == "conflicting":
                reason = None if self.params.keep_conflicting else "license/conflicting"
            elif found.license is None:
                reason = None if self.params.keep_unknown else "license/unknown"
            else:
                reason = None if self.allowed(found.license) else "license/not_allowed"
            label = found.license or found.source
            per_license[label] += 1
            documents[label] += len(rows)
            for row in rows:
                reasons[row], licenses[row] = reason, found.license
            known_stars = [stars[row] for row in rows if stars[row] is not None]
            report.append({
                "repository": repository, "files": len(rows), "bytes": sum(len(text.encode()) for text in texts),
                "license": found.license, "license_source": found.source, "license_evidence": found.evidence,
                "declared_license": found.declared,
                "stars": max(known_stars) if known_stars else None,
                "has_tests": any(TEST_PATH.search(path) for path in paths),
            })  # fmt: skip
        stats = {"license_repositories": dict(per_license), "license_documents": dict(documents), "report": report}
        return Annotation(reasons, {"license": licenses}, stats)


@dataclass(frozen=True)
class Detection:
    """What one repository's files say: the SPDX expression (None when unknown or conflicting), where it came from
    ("metadata", "license_file", "readme", "header", "unknown", "conflicting") and the files that said it."""

    license: str | None
    source: str
    evidence: str
    declared: str | None = None  # what a package manifest declares, beside what the files say


def with_declared(found: Detection, expression: str, path: str, prefer: str) -> Detection:
    """The detection with a manifest's declared expression set beside it: the declaration wins over a README's or a
    header's notice, and over the licence files when `prefer` is 'declared'; licences that differ from the files'
    (-only/-or-later aside) are reported as a conflict."""
    note = f"{path} declares {expression}"
    if found.source in ("unknown", "readme", "header") or prefer == "declared":  # a declaration is exact, a notice a guess
        files = f"; files: {found.license or found.source} ({found.evidence})" if found.evidence else ""
        return Detection(expression, "package_metadata", note + files, expression)
    differs = {_loose(spdx) for spdx in _ids(expression)} != {_loose(spdx) for spdx in _ids(found.license)}
    beside = f"; conflict: {note}, the files {found.license}" if found.license and differs else f"; {note}"
    return Detection(found.license, found.source, found.evidence + beside, expression)


def _loose(spdx: str) -> str:
    """An id without the GNU suffix a licence file alone cannot show (-only, -or-later, +)."""
    return re.sub(r"-only$|-or-later$|\+$", "", spdx)


def detect(matcher: LicenseMatcher, paths: list[str], texts: list[str]) -> Detection:
    """The license of one repository from its files (see the module docstring for the order)."""
    top = [(path, text) for path, text in zip(paths, texts) if "/" not in path.strip("/")]
    license_files = [(path, _own_part(text)) for path, text in top
                     if LICENSE_FILE.match(path.strip("/")) and not THIRD_PARTY.search(path)]  # fmt: skip
    readmes = [(path, _license_section(text)) for path, text in top if README.match(path.strip("/"))]
    file_reads = [_read(matcher, path, text, full_text=True) for path, text in license_files]
    readme_reads = [_read(matcher, path, section, full_text=True) for path, section in readmes if section]
    headers = [(path, text[:HEADER_CHARS]) for path, text in zip(paths, texts)
               if not LICENSE_FILE.match(PurePosixPath(path).name) and PurePosixPath(path).name.lower() not in MANIFESTS]  # fmt: skip
    later = any(read.or_later for read in file_reads + readme_reads) or any(says_or_later(text) for _, text in headers)
    offers_choice = any(read.offers_choice for read in file_reads + readme_reads)  # a README's "either of" covers LICENSE-*
    exceptions = matcher.index.exceptions
    from_files = _combine(file_reads, "license_file", offers_choice, later, exceptions)
    from_readme = _combine(readme_reads, "readme", offers_choice, later, exceptions)
    if from_files.license:
        readme_ids = _ids(from_readme.license)
        if readme_ids and not readme_ids & _ids(from_files.license):
            return Detection(None, "conflicting", f"{from_files.evidence}; {from_readme.evidence}")
        return from_files
    if from_readme.license:
        return from_readme
    from_headers = _combine([_read(matcher, path, text, full_text=False) for path, text in headers], "header", False, later, exceptions)
    return from_headers if from_headers.license else Detection(None, "unknown", "")


@dataclass(frozen=True)
class _Read:
    """What one text names: SPDX ids as written (`identified`), or detected licenses whose GNU ones still need
    -only/-or-later; and what its words outside any license text say."""

    path: str
    named: list[str]
    identified: bool
    offers_choice: bool  # "dual licensed", "licensed under either of", "at your option"
    or_later: bool  # "or (at your option) any later version" (the GPL's own text always has it: not counted)
    left: str | None = None  # a restriction in the words outside the licence texts it matched (UNKNOWN_RESTRICTION)


def _combine(reads: list[_Read], source: str, offers_choice: bool, later: bool, exceptions: dict[str, bool]) -> Detection:
    """The licenses the files name as one expression (OR when a text offers the choice, else AND), the exceptions
    found beside them attached (`with_exceptions`), with evidence."""
    per_read = [read.named if read.identified else [gnu_suffix(spdx, later) for spdx in read.named] for read in reads]
    found = [spdx for named in per_read for spdx in named if spdx not in exceptions]
    if "LGPL-3.0-only" in found or "LGPL-3.0-or-later" in found:  # the LGPL-3.0 is the GPL-3.0 plus permissions: COPYING + COPYING.LESSER
        found = [spdx for spdx in found if not spdx.startswith("GPL-3.0")]
    beside = sorted({spdx for named in per_read for spdx in named if spdx in exceptions})
    expression = with_exceptions(join(found, offers_choice), beside, exceptions)
    evidence = "; ".join(f"{read.path}: {' + '.join(named)}" + (f' (left over: "{read.left}")' if read.left else "")
                         for read, named in zip(reads, per_read) if named)  # fmt: skip
    return Detection(expression, source if expression else "unknown", evidence)


def with_exceptions(expression: str | None, found: list[str], restricts: dict[str, bool]) -> str | None:
    """A licence with the exceptions found beside its text: one that adds a permission (Classpath-exception-2.0) is
    `WITH` a single licence; one that takes rights away (the Commons Clause) is `AND`, as is any exception beside
    several licences (which one it belongs to is not said) or beside none."""
    adding = [spdx for spdx in found if not restricts[spdx]]
    if adding and expression and " " not in expression:
        expression, adding = f"{expression} WITH {adding[0]}", adding[1:]
    others = adding + [spdx for spdx in found if restricts[spdx]]
    if not others:
        return expression
    return " AND ".join(([f"({expression})" if " OR " in expression else expression] if expression else []) + others)


def _read(matcher: LicenseMatcher, path: str, text: str, full_text: bool) -> _Read:
    """The licenses one text names. A license file or README: full texts (with notices in a short rest beside
    them), else SPDX identifiers, a bare id or notices. A header: SPDX identifiers, else notices (a full license
    text is not a header)."""
    rest = text
    if full_text and not matcher.identifiers(text[:IDENTIFIER_HEAD]):  # an SPDX header says exactly what prose suggests
        matches, rest = matcher.full_texts(text)
        if matches:
            named = list(dict.fromkeys(bsd_by_clauses(match.spdx, text) for match in matches))
            if len(rest.split()) <= MAX_REST_WORDS:
                beside = matcher.notices(ABOUT_THE_TEXT.sub(" ", rest) + "\n" + copyright_lines(text))
                named += [n for n in beside if not any(n == m or subsumes(m, n) for m in named)]
            left = restriction_left(rest)
            named += [UNKNOWN_RESTRICTION] if left else []
            return _Read(path, named, False, bool(DUAL.search(rest)), says_or_later(rest), left)
    identified = matcher.identifiers(text) or ([bare] if full_text and (bare := matcher.bare_id(text)) else [])
    named = identified or matcher.notices(text)
    return _Read(path, named, bool(identified), full_text and bool(DUAL.search(notice_text(rest))), says_or_later(text))


def _own_part(text: str) -> str:
    """A license file up to where it turns to bundled third-party software, when words come before that."""
    start = _bundled_line(text)
    if start is None:
        return text
    rule = list(_RULE_LINE.finditer(text, max(0, start - 400), start))  # "-----" just above: the bundled part's start
    if rule:
        start = rule[-1].start()
    return text[:start] if re.search(r"\w{3}", text[:start]) else text


def _bundled_line(text: str) -> int | None:
    """Where the first line BUNDLED matches starts. BUNDLED over a whole license text costs milliseconds (it has no
    literal to skip ahead by); the lower-cased text is first searched for its words, and only those lines tried."""
    lower = text.lower()
    if len(lower) != len(text):  # lower-casing moved offsets (a dotted capital I): search the slow way
        turn = BUNDLED.search(text)
        return None if turn is None else text.rfind("\n", 0, turn.start()) + 1
    for hit in _BUNDLED_WORDS.finditer(lower):
        start = text.rfind("\n", 0, hit.start()) + 1
        end = text.find("\n", hit.end())
        if BUNDLED.search(text, start, len(text) if end < 0 else end):
            return start
    return None


def _paths_from_urls(table: pa.Table, repositories: list[str]) -> list[str]:
    urls = table["url"].to_pylist() if "url" in table.column_names else [""] * table.num_rows
    return [url[len(repo) + 1 :] if url and repo and url.startswith(f"{repo}/") else url for url, repo in zip(urls, repositories)]


def _license_section(readme: str) -> str:
    """The README's license section: from a heading that says "License" to the next heading."""
    heading = _LICENSE_HEADING.search(readme)
    if heading is None:
        return ""
    rest = readme[heading.end() :]
    following = _HEADING.search(rest)
    return rest[: following.start()] if following else rest


def _ids(expression: str | None) -> set[str]:
    """The licence ids of an expression, exceptions left out (`Apache-2.0 WITH LLVM-exception` is Apache-2.0's)."""
    from license_expression import ExpressionError

    try:
        symbols = _licensing().license_symbols(expression, decompose=False) if expression else []
    except ExpressionError:  # an SPDX line cut short ("MIT AND"): its ids still say what it names
        return {word for word in re.split(r"[\s()]+", expression) if word and word not in ("AND", "OR", "WITH")}
    return {getattr(symbol, "license_symbol", symbol).key for symbol in symbols}


def expression_allowed(expression: str, allowed: set[str] | frozenset[str]) -> bool:
    """The expression parsed as SPDX says (license-expression): OR is allowed when any branch is, AND when every part
    is, at any nesting; `A WITH exception` is A's licence with an added permission, allowed when A is. An expression
    that does not parse is not allowed."""
    from license_expression import ExpressionError

    try:
        parsed = _licensing().parse(expression)
    except ExpressionError:
        return False
    return parsed is not None and _allowed(parsed, allowed)


def _allowed(node, allowed: set[str] | frozenset[str]) -> bool:
    from license_expression import LicenseWithExceptionSymbol

    if isinstance(node, LicenseWithExceptionSymbol):
        return node.license_symbol.key in allowed
    if not getattr(node, "args", ()):
        return node.key in allowed
    branches = (_allowed(arg, allowed) for arg in node.args)
    return any(branches) if node.operator.strip() == "OR" else all(branches)


@cache
def _licensing():
    """A plain Licensing (no symbol table): ids stay as the detector spells them; parsing is ~0.1 ms an expression."""
    from license_expression import Licensing

    return Licensing()
