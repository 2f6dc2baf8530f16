"""Text normalization for deduplication: what two documents must share to count as the same text.

A batch is normalized as one string and one byte buffer, not document by document: lowercasing and Unicode
decomposition run once in C over the batch; a compiled pass over the UTF-8 bytes drops punctuation, rewrites
digits and collapses whitespace, deciding ASCII itself and other characters by a table filled in Python for the
few distinct ones the batch has. Every mode leaves words separated by single spaces, so a word n-gram is a contiguous
slice of the normalized bytes (the MinHash kernel relies on it).
"""

import re
import unicodedata
from typing import Literal

import numpy as np

Normalization = Literal["whitespace", "lower", "words", "fineweb"]

_SEPARATOR = "\ue000"  # a private-use character between documents; documents' own are replaced by a space
_COMBINING = re.compile(r"[\u0300-\u036f]")


def normalized_bytes(texts: list[str | None], mode: Normalization) -> tuple[np.ndarray, np.ndarray]:
    """The batch normalized as one UTF-8 buffer; document i is `buffer[offsets[i]:offsets[i+1]]`.

    `whitespace`: collapse runs of whitespace. `lower`: also lowercase. `words`: also drop punctuation and symbols
    (decontamination's n-grams). `fineweb`: datatrove's `simplify_text` (lowercase, drop punctuation and symbols,
    digits to 0, strip diacritics), as FineWeb's MinHash does."""
    if not texts:
        return np.empty(0, dtype=np.uint8), np.zeros(1, dtype=np.int64)
    batch = _SEPARATOR.join((text or "").replace(_SEPARATOR, " ") for text in texts)
    if mode != "whitespace":
        batch = batch.lower()
    strip = mode in ("words", "fineweb")
    if mode == "fineweb" and not batch.isascii():
        batch = unicodedata.normalize("NFC", _COMBINING.sub("", unicodedata.normalize("NFD", batch)))
    from filters.normalization_kernels import DELETE, SPACE, ZERO, collapse, non_ascii

    data = np.frombuffer(batch.encode("utf-8"), dtype=np.uint8)
    actions = np.zeros(0x110000, dtype=np.uint8)
    if not batch.isascii():
        for code in non_ascii(data).tolist():
            char = chr(code)
            if char.isspace():
                actions[code] = SPACE
            elif mode == "fineweb" and char.isdecimal():
                actions[code] = ZERO
            elif strip and not char.isalnum():
                actions[code] = DELETE
    return collapse(data, strip, mode == "fineweb", actions)


def normalize_batch(texts: list[str | None], mode: Normalization) -> list[str]:
    """`normalized_bytes` as one string per document."""
    buffer, offsets = normalized_bytes(texts, mode)
    data = buffer.tobytes()
    return [data[start:end].decode("utf-8") for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
