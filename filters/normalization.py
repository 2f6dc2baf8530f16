"""Text normalization for deduplication: what two documents must share to count as the same text.

A batch is normalized as one string and one byte buffer, not document by document: lowercasing and Unicode
decomposition run once in C over the batch, the few distinct non-ASCII characters that need rewriting are
replaced one `str.replace` each, and a compiled pass over the UTF-8 bytes drops ASCII punctuation, rewrites digits
and collapses whitespace. Every mode leaves words separated by single spaces, so a word n-gram is a contiguous
slice of the normalized bytes (the MinHash kernel relies on it).
"""

import re
import unicodedata
from typing import Literal

import numba
import numpy as np

Normalization = Literal["whitespace", "lower", "fineweb"]

_SEPARATOR = "\ue000"  # a private-use character between documents; documents' own are replaced by a space
_COMBINING = re.compile(r"[\u0300-\u036f]")


@numba.njit(cache=True)
def _collapse(data, simplify):
    """Split at separators (UTF-8 EE 80 80), collapse ASCII whitespace to single spaces, trim each document; with
    `simplify`, also drop ASCII punctuation (and `_`) and write ASCII digits as 0."""
    out = np.empty(len(data), dtype=np.uint8)
    offsets = [0]
    written, pending_space, document_empty = 0, False, True
    i = 0
    while i < len(data):
        byte = data[i]
        if byte == 0xEE and i + 2 < len(data) and data[i + 1] == 0x80 and data[i + 2] == 0x80:
            offsets.append(written)
            pending_space, document_empty = False, True
            i += 3
            continue
        i += 1
        if byte == 32 or 9 <= byte <= 13 or 28 <= byte <= 31:
            pending_space = True
            continue
        if simplify and byte < 128:
            if 48 <= byte <= 57:
                byte = 48
            elif not (97 <= byte <= 122 or 65 <= byte <= 90):
                continue
        if pending_space and not document_empty:
            out[written] = 32
            written += 1
        out[written] = byte
        written += 1
        pending_space, document_empty = False, False
    offsets.append(written)
    return out[:written], np.array(offsets, dtype=np.int64)


def normalized_bytes(texts: list[str | None], mode: Normalization) -> tuple[np.ndarray, np.ndarray]:
    """The batch normalized as one UTF-8 buffer; document i is `buffer[offsets[i]:offsets[i+1]]`.

    `whitespace`: collapse runs of whitespace. `lower`: also lowercase. `fineweb`: datatrove's `simplify_text`
    (lowercase, drop punctuation and symbols, digits to 0, strip diacritics), as FineWeb's MinHash does."""
    if not texts:
        return np.empty(0, dtype=np.uint8), np.zeros(1, dtype=np.int64)
    batch = _SEPARATOR.join((text or "").replace(_SEPARATOR, " ") for text in texts)
    if mode in ("lower", "fineweb"):
        batch = batch.lower()
    if not batch.isascii():
        if mode == "fineweb":
            batch = unicodedata.normalize("NFC", _COMBINING.sub("", unicodedata.normalize("NFD", batch)))
        for char in {char for char in set(batch) if not char.isascii() and char != _SEPARATOR}:
            if char.isspace():
                batch = batch.replace(char, " ")
            elif mode == "fineweb" and char.isdecimal():
                batch = batch.replace(char, "0")
            elif mode == "fineweb" and not char.isalnum():
                batch = batch.replace(char, "")
    return _collapse(np.frombuffer(batch.encode("utf-8"), dtype=np.uint8), mode == "fineweb")


def normalize_batch(texts: list[str | None], mode: Normalization) -> list[str]:
    """`normalized_bytes` as one string per document."""
    buffer, offsets = normalized_bytes(texts, mode)
    data = buffer.tobytes()
    return [data[start:end].decode("utf-8") for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
