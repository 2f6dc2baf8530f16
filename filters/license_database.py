"""The licence texts the detector matches a file against, each under the SPDX id it stands for:
- the SPDX License List's texts shipped in `assets/licenses/texts.json` (63 common ones, CC0-1.0; see NOTICE there);
- every licence of ScanCode's LicenseDB that has an SPDX id (about 600, from 0BSD to ZPL-2.1; exceptions, deprecated
  and generic entries left out), as the `licensedcode-data` package installs it. That data is CC-BY-4.0: "Copyright
  (c) nexB Inc. and others. ScanCode is a trademark of nexB Inc." (https://github.com/aboutcode-org/scancode-toolkit).
  It is a dependency, read where pip put it, never copied here.

GNU licences appear once, under their version (`GPL-2.0`): their -only and -or-later texts are the same licence, and
the detector takes the suffix from the notice beside the text (filters/license_match.gnu_suffix).
"""

import importlib.metadata
import json
import re
from functools import cache
from pathlib import Path
from typing import NamedTuple

ASSETS = Path(__file__).parent / "assets" / "licenses"
DATA_PACKAGE = "licensedcode-data"
_SPDX_KEY = re.compile(r"^spdx_license_key:\s*(\S+)\s*$", re.MULTILINE)
_CATEGORY = re.compile(r"^category:\s*(.+?)\s*$", re.MULTILINE)
_KEY = re.compile(r"^key:\s*(\S+)\s*$", re.MULTILINE)
_EXPRESSION = re.compile(r"^license_expression:\s*([^\s()]+)\s*$", re.MULTILINE)  # one licence, no AND/OR/WITH
_LICENSE_TEXT = re.compile(r"^is_license_text:\s*yes\s*$", re.MULTILINE)
_NOT_RELEVANT = re.compile(r"^relevance:\s*(?!100\b)\d+\s*$|^is_false_positive:\s*yes\s*$", re.MULTILINE)
_LEFT_OUT = re.compile(r"^is_(?:exception|deprecated|generic|unknown):\s*yes\s*$", re.MULTILINE)
_EXCEPTION = re.compile(r"^is_exception:\s*yes\s*$", re.MULTILINE)
_NOT_KEPT = re.compile(r"^is_(?:deprecated|generic|unknown):\s*yes\s*$", re.MULTILINE)


def licensedb_folder() -> Path:
    """`licensedcode/data/licenses` of the installed `licensedcode-data` (a dependency: without it the detector
    would know 63 licences and quietly call the rest unknown)."""
    try:
        folder = Path(importlib.metadata.distribution(DATA_PACKAGE).locate_file("licensedcode/data/licenses"))
    except importlib.metadata.PackageNotFoundError:
        folder = None
    if folder is None or not folder.is_dir():
        raise RuntimeError(f"the license stage needs ScanCode's licence database: pip install {DATA_PACKAGE}")
    return folder


class LicenceEntry(NamedTuple):
    """One `<key>.LICENSE` file of the LicenseDB: its YAML head's fields the detector uses, and its text."""

    key: str | None
    spdx: str | None  # None unless a real SPDX id of a licence kept (no LicenseRef-, exception, deprecated, generic)
    category: str | None  # ScanCode's grouping: Permissive, Public Domain, Copyleft, ...
    text: str
    exception: str | None = None  # the id of an exception or added condition kept (SPDX's, else LicenseRef-scancode-)


@cache
def licence_entries(folder: Path) -> tuple[LicenceEntry, ...]:
    """Every licence file of the LicenseDB, read once."""
    entries = []
    for path in sorted(folder.glob("*.LICENSE")):
        _, head, text = (path.read_text(encoding="utf-8", errors="replace").split("---\n", 2) + ["", ""])[:3]
        key, spdx, category = (match.group(1) if (match := pattern.search(head)) else None for pattern in (_KEY, _SPDX_KEY, _CATEGORY))
        kept = spdx is not None and not spdx.startswith("LicenseRef-") and not _LEFT_OUT.search(head)
        exception = spdx if spdx and text.strip() and _EXCEPTION.search(head) and not _NOT_KEPT.search(head) else None
        entries.append(LicenceEntry(key, spdx if kept else None, category, text, exception))
    return tuple(entries)


def database_texts(folder: Path) -> list[tuple[str, str]]:
    """(SPDX id, text) of every LicenseDB licence with a real SPDX id (no LicenseRef-, exception or deprecated one);
    a GNU licence's -only text under its bare version, its -or-later text (a notice, then the same text) left out."""
    entries = [(entry.spdx, entry.text) for entry in licence_entries(folder) if entry.spdx and entry.text.strip()]
    ids = {spdx for spdx, _ in entries}
    return [(_gnu_base(spdx), text) for spdx, text in entries
            if not (spdx.endswith("-or-later") and spdx.removesuffix("-or-later") + "-only" in ids)]  # fmt: skip


def rule_texts(folder: Path) -> list[tuple[str, str]]:
    """(SPDX id, text) of the LicenseDB's rules that are a licence's full text as found in the wild (a variant: the
    Apache-2.0 without its appendix, a BSD-3-Clause that says "the author"), for one licence with a real SPDX id."""
    spdx_of = {entry.key: entry.spdx for entry in licence_entries(folder) if entry.spdx}
    entries = []
    for path in sorted((folder.parent / "rules").glob("*.RULE")):
        parts = path.read_text(encoding="utf-8", errors="replace").split("---\n", 2)
        if len(parts) < 3 or not _LICENSE_TEXT.search(parts[1]) or _NOT_RELEVANT.search(parts[1]):
            continue
        expression = _EXPRESSION.search(parts[1])
        spdx = spdx_of.get(expression.group(1)) if expression else None
        if spdx and parts[2].strip():
            entries.append((spdx, parts[2]))
    return entries


def permissive_ids(folder: Path) -> frozenset[str]:
    """The SPDX ids the LicenseDB files under the category Permissive or Public Domain (ScanCode's own grouping,
    about 370 of its SPDX licences: IJG, FTL, HPND-Markus-Kuhn, BSD-3-Clause-HP, ...), less those that ask more
    than attribution (`restricted_ids`)."""
    permissive = {entry.spdx for entry in licence_entries(folder) if entry.spdx and entry.category in ("Permissive", "Public Domain")}
    return frozenset(permissive - restricted_ids(folder))


# what a licence may ask beyond attribution and keeping the notice, which `allow: permissive` refuses whatever the
# LicenseDB's category: BSD-4-Clause's advertising clause (every advertisement must carry an acknowledgement: the
# obligation BSD-3-Clause dropped and that makes it GPL-incompatible) and a field-of-use restriction (the JSON
# licence's "shall be used for Good, not Evil", which OSI and Debian reject). An endorsement clause ("not be used in
# advertising or publicity ... without permission", HPND's, MIT-CMU's) asks nothing and is not one of them.
RESTRICTION = re.compile(r"\b(?:all|any) advertising materials (?:and documentation )?mentioning\b|\bused for good not evil\b")
NOT_PERMISSIVE = ("JSON", "BSD-4-Clause", "BSD-4-Clause-UC", "OpenSSL")  # named as well, whatever a later LicenseDB's text says


def restricted_ids(folder: Path) -> frozenset[str]:
    """The SPDX ids of NOT_PERMISSIVE and of every LicenseDB licence whose text has a RESTRICTION."""
    flat = ((entry.spdx, re.sub(r"[^a-z0-9]+", " ", entry.text.lower())) for entry in licence_entries(folder) if entry.spdx)
    return frozenset(NOT_PERMISSIVE) | {spdx for spdx, text in flat if RESTRICTION.search(text)}


def _gnu_base(spdx: str) -> str:
    return spdx.removesuffix("-only")


def shipped_texts(folder: Path = ASSETS) -> list[tuple[str, str]]:
    return [(spdx, entry["text"]) for spdx, entry in json.loads((folder / "texts.json").read_text())["licenses"].items()]


# exceptions that take rights away rather than add them (the Commons Clause, "Source-available"): a file holding one
# is its licence AND the clause, which no permissive policy allows; every other exception adds a permission (WITH)
RESTRICTING_CATEGORIES = ("Source-available", "Commercial", "Free Restricted", "Proprietary Free")


class ExceptionText(NamedTuple):
    """A licence exception or added condition of the LicenseDB (Classpath-exception-2.0, LLVM-exception, the Commons
    Clause as LicenseRef-scancode-commons-clause): found beside a licence's text, it is named with it."""

    spdx: str  # an SPDX exception id, else the LicenseDB's LicenseRef-scancode- id
    text: str
    restricts: bool  # takes rights away (RESTRICTING_CATEGORIES): AND, not WITH


@cache
def exception_texts() -> tuple[ExceptionText, ...]:
    """Every exception of the LicenseDB with an id, deprecated and generic ones left out."""
    return tuple(ExceptionText(entry.exception, entry.text, entry.category in RESTRICTING_CATEGORIES)
                 for entry in licence_entries(licensedb_folder()) if entry.exception)  # fmt: skip


class LicenseText(NamedTuple):
    spdx: str
    text: str
    variant: bool  # a rule's text: a licence as found in the wild, perhaps cut short; never "incorporated" by another


@cache
def license_texts() -> tuple[LicenseText, ...]:
    """The shipped SPDX texts, the LicenseDB's (both kept where an id has both: two copies of a licence that differ in
    a line or two) and its full-text rules."""
    folder = licensedb_folder()
    texts = [LicenseText(spdx, text, False) for spdx, text in shipped_texts() + database_texts(folder)]
    return tuple(texts + [LicenseText(_gnu_base(spdx), text, True) for spdx, text in rule_texts(folder)])
