"""The licence texts (filters/license_database.py) as a shingle index the matcher looks a file up in.

Words are lower-cased, without punctuation, comment markers, copyright lines or British spellings; each word gets an
id, and each 4-word shingle a 64-bit code. The index is one sorted array of the texts' codes beside the text each
came from, so a file's shingles are looked up with one binary search.

Building it reads about 4,000 files of the LicenseDB and takes a few seconds, so it is kept in the per-machine cache
(filters/packaged.py: `$CURATE_CACHE`, else `~/.cache/pretrain-stack`) under a digest of the data package's version,
the shipped texts and the code that builds it: a worker loads it in well under a second, and any change rebuilds it.
Where the cache cannot be written, each process builds its own.
"""

import importlib.metadata
import re
import shutil
import zipfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from filters import license_database
from filters.license_database import (
    ASSETS, DATA_PACKAGE, ExceptionText, LicenseText, exception_texts, license_texts, licensedb_folder, permissive_ids,
)
from filters.packaged import cached, file_digest

SHINGLE = 4
MIN_TEXT_SHINGLES = 20  # a shorter licence text is a notice: read by the notice patterns, not matched as a full text
SAME_VARIANT = 0.9  # a rule's text sharing this much (Jaccard) with a text kept for its licence adds nothing to it
INCORPORATED = 0.99  # share of another licence's text a text must carry to incorporate it (LGPL-3.0 carries GPL-3.0)
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: the words' ids times powers of it, summed, are a shingle's code
_WORD = re.compile(r"[a-z0-9]+(?:\.[0-9]+)*")
_SPELLINGS = {"licence": "license", "licences": "licenses", "licenced": "licensed", "copyrights": "copyright"}
_COPYRIGHT_LINE = re.compile(r"^\W*(?:copyright\s*(?:\(c\)|©|\d{4}|by\b|<)|\(c\)|©).*$", re.IGNORECASE | re.MULTILINE)


def normalize(text: str) -> list[str]:
    """Lower-case words without punctuation, comment markers or British spellings: the form both sides are compared in."""
    return [_SPELLINGS.get(word, word) for word in _WORD.findall(text.lower())]


def without_copyright_lines(text: str) -> str:
    """Copyright lines differ in every copy of a license (names, years): both sides are compared without them."""
    return _COPYRIGHT_LINE.sub("", text)


def copyright_lines(text: str) -> str:
    """The lines `without_copyright_lines` takes out: one may go on to name a licence ("copyright (c) 1998 by
    Secret Labs AB and licensed under CNRI's Python 1.6 license")."""
    return "\n".join(match.group(0) for match in _COPYRIGHT_LINE.finditer(text))


@dataclass
class Postings:
    """Shingle code -> the texts holding it, as sorted distinct codes and each one's slice of `entries`."""

    keys: np.ndarray  # distinct codes, sorted (uint64)
    starts: np.ndarray  # keys[i]'s texts are entries[starts[i]:starts[i + 1]]
    entries: np.ndarray  # int32

    @classmethod
    def of(cls, shingles: list[np.ndarray]) -> "Postings":
        codes = np.concatenate(shingles) if shingles else np.zeros(0, np.uint64)
        entry_of = np.repeat(np.arange(len(shingles), dtype=np.int32), [len(each) for each in shingles])
        order = np.argsort(codes, kind="stable")
        codes, entry_of = codes[order], entry_of[order]
        first = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1]))) if len(codes) else np.zeros(0, np.int64)
        return cls(codes[first], np.append(first, len(codes)), entry_of)

    def lookup(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For distinct `codes`, every (the code's position in `codes`, a text holding it) pair."""
        if not len(self.keys):
            return np.zeros(0, np.int64), np.zeros(0, np.int32)
        slot = np.searchsorted(self.keys, codes).clip(0, len(self.keys) - 1)
        known = np.flatnonzero(self.keys[slot] == codes)
        low, high = self.starts[slot[known]], self.starts[slot[known] + 1]
        counts = high - low
        offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        return np.repeat(known, counts), self.entries[np.repeat(low, counts) + offsets]


def distinct(codes: np.ndarray) -> np.ndarray:
    """np.unique by sorting (faster than its hash table on a few thousand 64-bit codes)."""
    ordered = np.sort(codes)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


@dataclass
class LicenseIndex:
    vocabulary: dict[str, int]  # word -> id from 1; 0 stands for a word no licence text has
    spdx: list[str]  # per text
    postings: Postings  # of the texts' own shingles
    sizes: np.ndarray  # own shingles per text
    incorporates: dict[int, set[int]]  # text -> the other licences' texts it carries whole
    whole: dict[int, np.ndarray]  # for those: all their shingles, the incorporated text's too
    permissive: frozenset[str]  # SPDX ids the LicenseDB files as Permissive or Public Domain: read here, not per worker
    exceptions: dict[str, bool]  # exception id -> whether it restricts (filters/license_database.ExceptionText)

    def codes(self, words: list[str]) -> np.ndarray:
        """Each shingle's code; 0 where a word is one no licence text has (it can match nothing)."""
        return _codes(np.array([self.vocabulary.get(word, 0) for word in words], dtype=np.uint64))

    @classmethod
    def build(cls, texts: Sequence[LicenseText], permissive: frozenset[str] = frozenset(),
              exceptions: Sequence[ExceptionText] = ()) -> "LicenseIndex":  # fmt: skip
        """Texts shorter than MIN_TEXT_SHINGLES and rule variants near-identical to a text kept for the same licence
        are left out; a text carrying another licence's whole text is indexed by its own shingles. An exception is
        indexed by the shingles no licence text has (many restate the GPL's notice before their own words), so a
        licence's text or notice alone never looks like an exception."""
        vocabulary: dict[str, int] = {}
        shingles, kept = [], []
        per_licence: dict[str, list[np.ndarray]] = defaultdict(list)
        for entry in texts:
            ids = [vocabulary.setdefault(word, len(vocabulary) + 1) for word in normalize(without_copyright_lines(entry.text))]
            codes = distinct(_codes(np.array(ids, dtype=np.uint64)))
            if len(codes) < MIN_TEXT_SHINGLES:
                continue
            if entry.variant and any(_jaccard(codes, other) >= SAME_VARIANT for other in per_licence[entry.spdx]):
                continue
            per_licence[entry.spdx].append(codes)
            shingles.append(codes)
            kept.append(entry)
        spdx = [entry.spdx for entry in kept]
        incorporates = incorporated_texts(spdx, shingles, [not entry.variant for entry in kept])
        own = [np.setdiff1d(codes, np.concatenate([shingles[o] for o in incorporates[entry]]), assume_unique=True)
               if entry in incorporates else codes for entry, codes in enumerate(shingles)]  # fmt: skip
        in_licences = distinct(np.concatenate(shingles)) if shingles else np.zeros(0, np.uint64)
        restricts = {}
        for exception in exceptions:
            ids = [vocabulary.setdefault(word, len(vocabulary) + 1) for word in normalize(without_copyright_lines(exception.text))]
            codes = np.setdiff1d(distinct(_codes(np.array(ids, dtype=np.uint64))), in_licences, assume_unique=True)
            if len(codes) >= MIN_TEXT_SHINGLES:
                spdx.append(exception.spdx)
                own.append(codes)
                restricts[exception.spdx] = exception.restricts
        return cls(vocabulary, spdx, Postings.of(own), np.array([max(1, len(codes)) for codes in own]), incorporates,
                   {entry: shingles[entry] for entry in incorporates}, permissive, restricts)  # fmt: skip

    def save(self, path: Path) -> None:
        pairs = [(entry, other) for entry, others in self.incorporates.items() for other in sorted(others)]
        whole = sorted(self.whole)
        with open(path, "wb") as handle:
            np.savez(handle, words=np.array(sorted(self.vocabulary, key=self.vocabulary.get)), spdx=np.array(self.spdx),
                     keys=self.postings.keys, starts=self.postings.starts, entries=self.postings.entries, sizes=self.sizes, incorporates=np.array(pairs, dtype=np.int64).reshape(-1, 2),
                     whole_entries=np.array(whole, dtype=np.int64), whole_lengths=np.array([len(self.whole[e]) for e in whole], dtype=np.int64),
                     whole_codes=np.concatenate([self.whole[e] for e in whole]) if whole else np.zeros(0, np.uint64),
                     permissive=np.array(sorted(self.permissive), dtype=str),
                     exception_ids=np.array(list(self.exceptions), dtype=str), exception_restricts=np.array(list(self.exceptions.values()), dtype=bool))  # fmt: skip

    @classmethod
    def load(cls, path: Path) -> "LicenseIndex":
        with np.load(path, allow_pickle=False) as data:
            incorporates: dict[int, set[int]] = defaultdict(set)
            for entry, other in data["incorporates"].tolist():
                incorporates[entry].add(other)
            whole = dict(zip(data["whole_entries"].tolist(), np.split(data["whole_codes"], np.cumsum(data["whole_lengths"])[:-1])))
            return cls({word: i + 1 for i, word in enumerate(data["words"].tolist())}, data["spdx"].tolist(),
                       Postings(data["keys"], data["starts"], data["entries"]), data["sizes"], dict(incorporates),
                       whole if len(data["whole_entries"]) else {}, frozenset(data["permissive"].tolist()),
                       dict(zip(data["exception_ids"].tolist(), data["exception_restricts"].tolist())))  # fmt: skip


def _codes(ids: np.ndarray) -> np.ndarray:
    if len(ids) < SHINGLE:
        return np.zeros(0, dtype=np.uint64)
    windows = np.lib.stride_tricks.sliding_window_view(ids, SHINGLE)
    codes = np.zeros(len(windows), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in range(SHINGLE):
            codes = codes * _MIX + windows[:, column]
    return np.where((windows == 0).any(axis=1), np.uint64(0), codes)


def _jaccard(a: np.ndarray, b: np.ndarray) -> float:
    shared = len(np.intersect1d(a, b, assume_unique=True))
    return shared / (len(a) + len(b) - shared)


def incorporated_texts(spdx: list[str], shingles: list[np.ndarray], canonical: list[bool]) -> dict[int, set[int]]:
    """For each text, the canonical texts of other licences whose whole text it carries (the LGPL-3.0 as SPDX and
    GNU ship it: its own terms, then the GPL-3.0 they supplement). It is indexed by its own shingles only, so a file
    holding the LGPL's terms alone is the LGPL, and a file holding both texts is the LGPL, not an AND. A variant (a
    rule's text, perhaps a fragment) is never the incorporated one."""
    index = Postings.of(shingles)
    sizes = np.array([len(codes) for codes in shingles])
    eligible = np.array(canonical)
    incorporates: dict[int, set[int]] = {}
    for entry, codes in enumerate(shingles):
        smaller = eligible & (len(codes) > 1.1 * sizes)
        if not smaller.any():
            continue
        _, holders = index.lookup(codes)
        shared = np.bincount(holders, minlength=len(shingles))
        others = {int(other) for other in np.flatnonzero(smaller & (shared >= INCORPORATED * sizes)) if spdx[other] != spdx[entry]}
        if others:
            incorporates[entry] = others
    return incorporates


INDEX_FILE = "index.npz"


def cache_key() -> str:
    """What the index is built from: the data package's version, the shipped texts and the code that builds it."""
    sources = (Path(__file__), Path(license_database.__file__), ASSETS / "texts.json")
    return file_digest(*sources, extra=importlib.metadata.version(DATA_PACKAGE))


@cache
def default_index() -> LicenseIndex:
    """The index of every licence text, from the per-machine cache (built into it the first time); where the cache
    cannot be written, or holds a damaged index (then removed), built in this process."""
    try:
        folder = cached("license_index", cache_key(), lambda staging: _build().save(staging / INDEX_FILE))
        try:
            return LicenseIndex.load(folder / INDEX_FILE)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            shutil.rmtree(folder, ignore_errors=True)  # damaged: the next process builds it again
    except OSError:
        pass
    return _build()


def _build() -> LicenseIndex:
    return LicenseIndex.build(license_texts(), permissive_ids(licensedb_folder()), exception_texts())
