"""Text normalization for deduplication: what two documents must share to count as the same text.

Normalizing a whole batch as one string keeps the per-document Python work to a split: lowercasing, punctuation
and digit rewriting run once in C over the batch. Every mode collapses whitespace to single spaces, so a word
n-gram is a contiguous slice of the normalized bytes (the MinHash kernel relies on it).
"""

import re
import unicodedata
from typing import Literal

Normalization = Literal["whitespace", "lower", "fineweb"]

_SEPARATOR = "\ue000"  # a private-use character: survives every rewrite below, never occurs in web text we keep
_PUNCTUATION = re.compile(rf"[^\w\s{_SEPARATOR}]|_")
_DIGITS = re.compile(r"\d")
_COMBINING = re.compile(r"[\u0300-\u036f]")
_SPACES = re.compile(r"\s+")


def normalize_batch(texts: list[str | None], mode: Normalization) -> list[str]:
    """`whitespace`: collapse runs of whitespace. `lower`: also lowercase. `fineweb`: datatrove's `simplify_text`
    (lowercase, drop punctuation, digits to 0, strip diacritics), as FineWeb's MinHash does."""
    batch = _SEPARATOR.join((text or "").replace(_SEPARATOR, " ") for text in texts)
    if mode in ("lower", "fineweb"):
        batch = batch.lower()
    if mode == "fineweb":
        batch = _PUNCTUATION.sub("", batch)
        batch = _DIGITS.sub("0", batch)
        if not batch.isascii():
            batch = unicodedata.normalize("NFC", _COMBINING.sub("", unicodedata.normalize("NFD", batch)))
    return [part.strip() for part in _SPACES.sub(" ", batch).split(_SEPARATOR)]
