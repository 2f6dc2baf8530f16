"""License detection against every licence text with an SPDX id that SPDX's list and ScanCode's LicenseDB hold
(filters/license_database.py), without scancode's dependencies; the benchmark is benchmarks/license_detection.py
(docs/benchmarks.md, "License detection").

A file's words become 4-word shingles; a license is present where the file holds at least `MIN_COVERAGE` of one of
that license's texts' shingles (filters/license_index.py). Licenses that are near-subsets of each other (MIT-0 of MIT, BSD-2-Clause of BSD-3-Clause) are told
apart by ranking candidates by coverage² x size and dropping a candidate whose matched shingles an earlier one already
claimed. Texts too short for that (a README's "Licensed under the Apache License, Version 2.0", a header comment)
are read by `SPDX-License-Identifier` lines and by the notice patterns below.
"""

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from filters.license_database import ASSETS
from filters.license_index import SHINGLE, LicenseIndex, default_index, distinct, normalize, without_copyright_lines

MIN_COVERAGE = 0.6  # of a license's shingles, for its full text to count as present
MAX_REST_WORDS = 200  # notices are read beside a full text only in a short rest (a preamble, not third-party notices)
MISSING_WEIGHT = 0.1  # a license shingle the file lacks, against one it holds: files leave out preambles and appendices
MAX_CLAIMED = 0.5  # a candidate whose matched shingles are mostly another found license's is part of that one
_SPDX_LINE = re.compile(r"SPDX-License-Identifier:\s*([A-Za-z0-9.+\- ()]+?)\s*(?:\*/|-->|#\}|\"|$)", re.MULTILINE)
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
        ("MPL-1.1", r"\bmozilla public licen[sc]e,? v(?:ersion|\.)? ?1\.1\b|\bmpl[ -]v?1\.1\b"),
        ("CNRI-Python", r"\blicen[sc]ed under cnri(?: s)? python\b|\bcnri(?: s)? python(?: 1\.6(?:\.1)?)? licen[sc]e\b|\bcnri open source (?:gpl compatible )?licen[sc]e agreement\b"),
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


def notice_text(text: str) -> str:
    """The text as one line of normalized words, for the notice patterns (which see no punctuation or line breaks)."""
    return " ".join(normalize(text))


@dataclass(frozen=True)
class Match:
    spdx: str
    coverage: float  # fraction of the license's shingles found


class LicenseMatcher:
    """Full licence texts looked up in the shingle index (filters/license_index.py), notices and SPDX ids read
    by patterns."""

    def __init__(self, index: LicenseIndex | None = None, folder: Path = ASSETS):
        self.index = default_index() if index is None else index
        self.known_ids = spdx_ids(folder)

    def full_texts(self, text: str) -> tuple[list[Match], str]:
        """The licenses whose full text the file holds, best first, and the file's words outside them (where a
        second license may be named by a notice, e.g. tqdm's MIT text followed by an MPL-2.0 header).

        Candidates are the texts the file covers past MIN_COVERAGE. Greedily, the one explaining the most of the file
        not yet explained (less MISSING_WEIGHT per shingle of its own the file lacks) is taken, until every candidate
        left has more than MAX_CLAIMED of its matched shingles explained already: a file holding MIT's and
        BSD-3-Clause's texts is those two, not NCSA (whose text mixes both) and a third."""
        index = self.index
        words = normalize(without_copyright_lines(text))
        codes = index.codes(words)
        present = distinct(codes[codes != 0])
        pair_shingle, pair_entry = index.postings.lookup(present)
        hit_counts = np.bincount(pair_entry, minlength=len(index.sizes))
        candidates = np.flatnonzero(hit_counts >= MIN_COVERAGE * index.sizes)
        keep = np.zeros(len(index.sizes), dtype=bool)
        keep[candidates] = True
        keep = keep[pair_entry]
        pair_shingle, pair_entry = pair_shingle[keep], pair_entry[keep]
        found: list[tuple[int, Match]] = []
        claimed = np.zeros(len(present), dtype=bool)
        missing = index.sizes - hit_counts  # the license's shingles the file lacks (a preamble or appendix left out)
        open_ = candidates
        while len(open_):
            unclaimed = hit_counts - np.bincount(pair_entry, weights=claimed[pair_shingle], minlength=len(index.sizes))
            open_ = open_[unclaimed[open_] >= (1 - MAX_CLAIMED) * hit_counts[open_]]
            if not len(open_):
                break
            score = unclaimed[open_] - MISSING_WEIGHT * missing[open_]
            best = open_[np.flatnonzero(score == score.max())]
            entry = int(min(best, key=lambda e: index.spdx[e]))
            if index.spdx[entry] not in {match.spdx for _, match in found}:  # not a second copy of a license found
                found.append((entry, Match(index.spdx[entry], round(float(hit_counts[entry] / index.sizes[entry]), 3))))
            claimed[pair_shingle[pair_entry == entry]] = True
            open_ = open_[open_ != entry]
        inside = {index.spdx[other] for entry, _ in found for other in index.incorporates.get(entry, ())}
        found = [(entry, match) for entry, match in found if match.spdx not in inside]
        for entry, _ in found:  # the incorporated text's words are the license's, not a notice beside it
            if entry in index.whole:
                claimed |= np.isin(present, index.whole[entry], assume_unique=True)
        if len(present):
            starts = (codes != 0) & claimed[np.searchsorted(present, codes).clip(0, len(present) - 1)]
            covered = np.convolve(starts.astype(np.int32), np.ones(SHINGLE, dtype=np.int32))[: len(words)] > 0
        else:
            covered = np.zeros(len(words), dtype=bool)
        return [match for _, match in found], " ".join(word for word, inside in zip(words, covered) if not inside)

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
        found, choice = [], bool(DUAL.search(flat))
        for spdx, pattern in NOTICES:
            if pattern.search(flat) and not any(subsumes(earlier, spdx, choice) for earlier in found):
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


# BSD-2/3/4-Clause share their conditions and disclaimer; they differ by clause: BSD-3 adds the endorsement clause,
# BSD-4 the advertising clause too. Shingles weigh the disclaimer's wording ("THE REGENTS" or "THE COPYRIGHT HOLDER")
# as much as a clause, so a two-clause text in the regents' wording came back BSD-3-Clause: the clauses decide instead
_ADVERTISING_CLAUSE = re.compile(r"\badvertising materials (?:and documentation )?mentioning features\b")
_ENDORSEMENT_CLAUSE = re.compile(r"\bbe used to endorse or promote\b")
BSD_BY_CLAUSES = ("BSD-2-Clause", "BSD-3-Clause", "BSD-4-Clause")


def bsd_by_clauses(spdx: str, text: str) -> str:
    """A generic BSD licence found by its text, named by the clauses the text has: the advertising clause makes it
    BSD-4-Clause, else the endorsement clause BSD-3-Clause, else BSD-2-Clause. Named variants (BSD-3-Clause-Clear,
    BSD-4-Clause-UC, ...) are told apart by their own words and kept."""
    if spdx not in BSD_BY_CLAUSES:
        return spdx
    flat = notice_text(text)
    if _ADVERTISING_CLAUSE.search(flat):
        return "BSD-4-Clause"
    return "BSD-3-Clause" if _ENDORSEMENT_CLAUSE.search(flat) else "BSD-2-Clause"


# a notice of the first names the second within its own name ("MIT-0" holds "MIT")
_NAME_HOLDS = {("MIT-0", "MIT"), ("Python-2.0", "PSF-2.0"), ("LGPL-2.1", "LGPL-2.0"), ("CC-BY-SA-4.0", "CC-BY-4.0")}
# a notice of the first names the second as the licence it builds on (the LGPL's and AGPL's notices name the GPL):
# not where the text offers a choice among licences ("GPL 2.0 or LGPL 2.1 or MPL 1.1, at your option" names three)
_TEXT_NAMES = {("AGPL-3.0", "GPL-3.0"), ("LGPL-3.0", "GPL-3.0"), ("LGPL-2.1", "GPL-2.0"), ("LGPL-2.0", "GPL-2.0")}


# words left over beside a licence's text that take rights away, which no licence the file matched explains: the
# file is that licence AND this unknown restriction (SPDX's guidelines: a licence matches only when nothing
# substantive is left), and the words go into license_evidence
UNKNOWN_RESTRICTION = "LicenseRef-pretrain-stack-unknown-restriction"
_RESTRICTION = re.compile(
    r"\b(?:for|to) non ?commercial (?:use|purposes)(?! or commercial)\b|\bnon ?commercial (?:use|purposes) only\b"
    r"|\bnot (?:be )?used for (?:any )?(?:commercial|military|evil)\b|\bused for good not evil\b|\bthe right to sell\b"
    r"|\bmay not (?:sell|be sold)\b|\b(?:personal|academic|research|educational) (?:use|purposes) only\b"
)


def restriction_left(rest: str) -> str | None:
    """The words around the first restriction in a licence file's words outside its matched licence texts."""
    found = _RESTRICTION.search(rest)
    if found is None:
        return None
    before, after = rest[: found.start()].split()[-8:], rest[found.end() :].split()[:8]
    return " ".join(before + [found.group(0)] + after)


def subsumes(earlier: str, later: str, choice: bool = False) -> bool:
    return (earlier, later) in _NAME_HOLDS or (not choice and (earlier, later) in _TEXT_NAMES)


def gnu_suffix(spdx: str, later: bool) -> str:
    """GNU licenses need `-only` or `-or-later` in SPDX; the texts are the same, the notice ("or any later
    version") decides, and without one `-only` is the claim the text alone supports."""
    if spdx.lower() + "-only" not in spdx_ids():
        return spdx
    return f"{spdx}-or-later" if later else f"{spdx}-only"


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
