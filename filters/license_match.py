"""License detection against the SPDX license texts shipped in `filters/assets/licenses/` (SPDX License List 3.28.0,
63 common licenses), without scancode's dependencies: the benchmark (docs/benchmarks.md, "License detection") found
it as accurate as scancode-toolkit on real LICENSE files at a small fraction of the time.

A file's words become 4-word shingles; a license is present where the file holds at least `MIN_COVERAGE` of that
license's shingles. Licenses that are near-subsets of each other (MIT-0 of MIT, BSD-2-Clause of BSD-3-Clause) are told
apart by ranking candidates by coverage² x size and dropping a candidate whose matched shingles an earlier one already
claimed. Texts too short for that (a README's "Licensed under the Apache License, Version 2.0", a header comment)
are read by `SPDX-License-Identifier` lines and by the notice patterns below.
"""

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ASSETS = Path(__file__).parent / "assets" / "licenses"
SHINGLE = 4
MIN_COVERAGE = 0.6  # of a license's shingles, for its full text to count as present
MAX_REST_WORDS = 200  # notices are read beside a full text only in a short rest (a preamble, not third-party notices)
MAX_CLAIMED = 0.5  # a candidate whose matched shingles are mostly another found license's is part of that one
_WORD = re.compile(r"[a-z0-9]+(?:\.[0-9]+)*")
_SPELLINGS = {"licence": "license", "licences": "licenses", "licenced": "licensed", "copyrights": "copyright"}
_SPDX_LINE = re.compile(r"SPDX-License-Identifier:\s*([A-Za-z0-9.+\- ()]+?)\s*(?:\*/|-->|#\}|\"|$)", re.MULTILINE)
_COPYRIGHT_LINE = re.compile(r"^\W*(?:copyright\s*(?:\(c\)|©|\d{4}|by\b|<)|\(c\)|©).*$", re.IGNORECASE | re.MULTILINE)
_EXPRESSION_TOKEN = re.compile(r"\(|\)|[A-Za-z0-9.+\-]+")
# a text offering a choice between licenses: their combination is OR, else AND (checked against every shipped text)
DUAL = re.compile(
    r"\bdual licen[sc]ed\b|\bdual licen[sc]e\b|\beither of (?:the )?(?:following )?licen[sc]es\b"
    r"|\blicen[sc]ed under either\b|\bat your (?:option|choice)\b(?! any later)(?! either version)|\beither of the licen[sc]es\b"
)
_LATER = re.compile(r"\bor at your option any later version\b|\bor any later version\b")
# what a license document says of its own text, not a license of the software: Creative Commons' legal code ends with
# "the text of the Creative Commons public licenses is dedicated to the public domain under the CC0 ..."
ABOUT_THE_TEXT = re.compile(r"\bthe text of the(?: \w+){0,6} is dedicated to the public domain under the cc0 public domain dedication\b")

# phrases naming a license in a README or header comment, tried in order; first the specific, then the general
NOTICES: list[tuple[str, re.Pattern]] = [
    (spdx, re.compile(pattern)) for spdx, pattern in [
        ("Apache-2.0", r"apache licen[sc]e(?: version| v)? ?2\.0|apache 2\.0 licen[sc]e|apache licen[sc]e 2\b|\bapache 2 licen[sc]e|\bapache 2\.0\b"),
        ("MIT-0", r"\bmit 0\b|\bmit no attribution\b"),
        ("MIT", r"\bmit licen[sc]e\b|\blicen[sc]ed under (?:the )?mit\b|\b(?:licen[sc]e|licensed)\s*:?\s*mit\b|\bmit licen[sc]ed\b|\bunder (?:the )?(?:terms of the )?mit\b|\bexpat licen[sc]e\b"),
        ("BSD-3-Clause", r"\bbsd[ -]3[ -]clause\b|\b3[ -]clause bsd\b|\bnew bsd licen[sc]e\b|\bmodified bsd licen[sc]e\b|\brevised bsd licen[sc]e\b"),
        ("BSD-2-Clause", r"\bbsd[ -]2[ -]clause\b|\b2[ -]clause bsd\b|\bsimplified bsd licen[sc]e\b|\bfreebsd licen[sc]e\b"),
        ("ISC", r"\bisc licen[sc]e\b|\blicen[sc]ed under (?:the )?isc\b"),
        ("Zlib", r"\bzlib licen[sc]e\b|\bzlib/libpng licen[sc]e\b"),
        ("BSL-1.0", r"\bboost software licen[sc]e\b"),
        ("Unlicense", r"\bthe unlicense\b|\bthis is free and unencumbered software released into the public domain\b"),
        ("CC0-1.0", r"\bcc0 1\.0\b|\bcc0\b"),
        ("MPL-2.0", r"\bmozilla public licen[sc]e,? v(?:ersion|\.)? ?2\.0\b|\bmpl[ -]2\.0\b|\bmpl v2\b"),
        ("AGPL-3.0", r"\bgnu affero general public licen[sc]e\b|\bagpl[ -]?v?3\b"),
        ("LGPL-2.1", r"\bgnu lesser general public licen[sc]e,? (?:as published by the free software foundation,? )?(?:either )?version 2\.1\b|\blgpl[ -]?v?2\.1\b"),
        ("LGPL-3.0", r"\bgnu lesser general public licen[sc]e,? (?:as published by the free software foundation,? )?(?:either )?version 3\b|\blgpl[ -]?v?3\b|\bgnu lesser general public licen[sc]e v3\b"),
        ("LGPL-2.0", r"\bgnu library general public licen[sc]e\b|\blgpl[ -]?v?2(?:\.0)?\b"),
        ("GPL-3.0", r"\bgnu general public licen[sc]e,? (?:as published by the free software foundation,? )?(?:either )?version 3\b|\bgplv3\b|\bgpl[ -]3(?:\.0)?\b|\bgnu general public licen[sc]e v3\b"),
        ("GPL-2.0", r"\bgnu general public licen[sc]e,? (?:as published by the free software foundation,? )?(?:either )?version 2\b|\bgplv2\b|\bgpl[ -]2(?:\.0)?\b|\bgnu general public licen[sc]e v2\b"),
        ("EPL-2.0", r"\beclipse public licen[sc]e,? v(?:ersion|\.)? ?2\.0\b|\bepl[ -]2\.0\b"),
        ("EPL-1.0", r"\beclipse public licen[sc]e,? v(?:ersion|\.)? ?1\.0\b|\bepl[ -]1\.0\b"),
        ("PSF-2.0", r"\bpython software foundation licen[sc]e\b|\bpsf licen[sc]e\b"),
        ("CC-BY-4.0", r"\bcreative commons attribution 4\.0 international\b|\bcc by 4\.0\b"),
        ("CC-BY-SA-4.0", r"\bcreative commons attribution sharealike 4\.0\b|\bcc by sa 4\.0\b"),
    ]
]  # fmt: skip


def normalize(text: str) -> list[str]:
    """Lower-case words without punctuation, comment markers or British spellings: the form both sides are compared in."""
    return [_SPELLINGS.get(word, word) for word in _WORD.findall(text.lower())]


def notice_text(text: str) -> str:
    """The text as one line of normalized words, for the notice patterns (which see no punctuation or line breaks)."""
    return " ".join(normalize(text))


def _without_copyright_lines(text: str) -> str:
    """Copyright lines differ in every copy of a license (names, years): both sides are compared without them."""
    return _COPYRIGHT_LINE.sub("", text)


def _shingles(words: list[str]) -> list[int]:
    return [hash(tuple(words[i : i + SHINGLE])) for i in range(max(0, len(words) - SHINGLE + 1))]


@dataclass(frozen=True)
class Match:
    spdx: str
    coverage: float  # fraction of the license's shingles found


class LicenseMatcher:
    """The shipped texts as an inverted index shingle -> licenses; built once per process (about 0.2 s)."""

    def __init__(self, folder: Path = ASSETS):
        data = json.loads((folder / "texts.json").read_text())["licenses"]
        self.known_ids = spdx_ids(folder)
        self.sizes: dict[str, int] = {}
        self.index: dict[int, list[str]] = {}
        texts = {spdx: set(_shingles(normalize(_without_copyright_lines(entry["text"])))) for spdx, entry in data.items()}
        self.incorporates = incorporated_texts(texts)
        self.whole = {spdx: texts[spdx] for spdx in self.incorporates}  # their words, the incorporated text's too
        for spdx, shingles in texts.items():
            own = shingles.difference(*(texts[other] for other in self.incorporates.get(spdx, ())))
            self.sizes[spdx] = len(own)
            for shingle in own:
                self.index.setdefault(shingle, []).append(spdx)

    def full_texts(self, text: str) -> tuple[list[Match], str]:
        """The licenses whose full text the file holds, best first, and the file's words outside them (where a
        second license may be named by a notice, e.g. tqdm's MIT text followed by an MPL-2.0 header)."""
        words = normalize(_without_copyright_lines(text))
        shingles = _shingles(words)
        present = set(shingles)
        hits: dict[str, set[int]] = {}
        for shingle in present:
            for spdx in self.index.get(shingle, ()):
                hits.setdefault(spdx, set()).add(shingle)
        ranked = sorted(hits, key=lambda spdx: (-len(hits[spdx]) ** 2 / self.sizes[spdx], spdx))
        found, claimed = [], set()
        for spdx in ranked:
            coverage = len(hits[spdx]) / self.sizes[spdx]
            if coverage < MIN_COVERAGE:
                continue
            if len(hits[spdx] & claimed) > MAX_CLAIMED * len(hits[spdx]):
                continue
            found.append(Match(spdx, round(coverage, 3)))
            claimed |= hits[spdx]
        inside = {other for match in found for other in self.incorporates.get(match.spdx, ())}
        found = [match for match in found if match.spdx not in inside]
        for match in found:  # the incorporated text's words are the license's, not a notice beside it
            claimed |= self.whole.get(match.spdx, set()) & present
        covered = [False] * len(words)
        for start, shingle in enumerate(shingles):
            if shingle in claimed:
                covered[start : start + SHINGLE] = [True] * SHINGLE
        return found, " ".join(word for word, inside in zip(words, covered) if not inside)

    def identifiers(self, text: str) -> list[str]:
        """The expressions of the text's `SPDX-License-Identifier:` lines, with ids spelled as SPDX spells them."""
        expressions = []
        for match in _SPDX_LINE.finditer(text):
            tokens = [self.known_ids.get(token.lower(), token) for token in _EXPRESSION_TOKEN.findall(match.group(1))]
            expression = " ".join(token.upper() if token.lower() in ("and", "or", "with") else token for token in tokens)
            if expression and all(t.upper() in ("AND", "OR", "WITH", "(", ")") or t.lower() in self.known_ids or t.startswith("LicenseRef-") for t in tokens):
                expressions.append(expression.replace("( ", "(").replace(" )", ")"))
        return expressions

    def notices(self, text: str) -> list[str]:
        """The licenses a short notice names ("Licensed under the MIT license"), a subsumed one left out (LGPL's
        text names the GPL, "MIT-0" contains "MIT")."""
        flat = notice_text(text)
        found = []
        for spdx, pattern in NOTICES:
            if pattern.search(flat) and not any(subsumes(earlier, spdx) for earlier in found):
                found.append(spdx)
        return found

    def bare_id(self, text: str) -> str | None:
        """A file that is nothing but an SPDX id or expression ("MIT", "Apache-2.0 OR MIT")."""
        stripped = text.strip()
        if not stripped or len(stripped) > 200:
            return None
        tokens = _EXPRESSION_TOKEN.findall(stripped)
        if tokens and all(t.upper() in ("AND", "OR", "(", ")") or t.lower() in self.known_ids for t in tokens):
            return " ".join(self.known_ids.get(t.lower(), t.upper()) for t in tokens).replace("( ", "(").replace(" )", ")")
        return None


def incorporated_texts(texts: dict[str, set[int]], share: float = 0.99) -> dict[str, set[str]]:
    """For each license, the other licenses whose whole text its own text carries (the LGPL-3.0 as SPDX and GNU
    ship it: its own terms, then the GPL-3.0 they supplement). It is indexed by its own shingles only, so a file
    holding the LGPL's terms alone is the LGPL, and a file holding both texts is the LGPL, not an AND."""
    incorporates: dict[str, set[str]] = {}
    for spdx, shingles in texts.items():
        for other, theirs in texts.items():
            if other != spdx and len(shingles) > 1.1 * len(theirs) and len(shingles & theirs) >= share * len(theirs):
                incorporates.setdefault(spdx, set()).add(other)
    return incorporates


def subsumes(earlier: str, later: str) -> bool:
    return (earlier, later) in {("MIT-0", "MIT"), ("Python-2.0", "PSF-2.0"), ("LGPL-2.1", "LGPL-2.0"), ("AGPL-3.0", "GPL-3.0"), ("LGPL-3.0", "GPL-3.0"), ("LGPL-2.1", "GPL-2.0"), ("LGPL-2.0", "GPL-2.0"), ("CC-BY-SA-4.0", "CC-BY-4.0")}


GNU_VERSIONED = ("GPL-2.0", "GPL-3.0", "LGPL-2.0", "LGPL-2.1", "LGPL-3.0", "AGPL-3.0", "GFDL-1.3")


def gnu_suffix(spdx: str, later: bool) -> str:
    """GNU licenses need `-only` or `-or-later` in SPDX; the texts are the same, the notice ("or any later
    version") decides, and without one `-only` is the claim the text alone supports."""
    return f"{spdx}-or-later" if spdx in GNU_VERSIONED and later else f"{spdx}-only" if spdx in GNU_VERSIONED else spdx


def says_or_later(text: str) -> bool:
    return bool(_LATER.search(notice_text(text)))


def join(licenses: list[str], dual: bool) -> str | None:
    """Several licenses as one SPDX expression: OR where the text offers a choice, else AND (all apply)."""
    unique = sorted(set(licenses))
    if not unique:
        return None
    operator = " OR " if dual else " AND "
    if len(unique) == 1:
        return unique[0]
    return operator.join(f"({spdx})" if " " in spdx and not spdx.startswith("(") else spdx for spdx in unique)


@cache
def spdx_ids(folder: Path = ASSETS) -> dict[str, str]:
    """Every SPDX license id (727, deprecated ones too), lower-cased to as SPDX spells it."""
    return {spdx.lower(): spdx for spdx in json.loads((folder / "ids.json").read_text())}


@cache
def matcher() -> LicenseMatcher:
    return LicenseMatcher()
