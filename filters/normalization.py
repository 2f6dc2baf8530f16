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

import numba
import numpy as np

Normalization = Literal["whitespace", "lower", "words", "fineweb"]

_SEPARATOR = "\ue000"  # a private-use character between documents; documents' own are replaced by a space
_COMBINING = re.compile(r"[\u0300-\u036f]")


_KEEP, _SPACE, _DELETE, _ZERO = 0, 1, 2, 3


@numba.njit(cache=True)
def _decode(data, i):
    """The code point starting at byte i of valid UTF-8, and its length in bytes."""
    byte = data[i]
    if byte < 0xE0:
        return ((byte & 0x1F) << 6) | (data[i + 1] & 0x3F), 2
    if byte < 0xF0:
        return ((byte & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F), 3
    return ((byte & 0x07) << 18) | ((data[i + 1] & 0x3F) << 12) | ((data[i + 2] & 0x3F) << 6) | (data[i + 3] & 0x3F), 4


@numba.njit(cache=True)
def _non_ascii(data):
    """The distinct non-ASCII code points of a UTF-8 buffer."""
    seen = np.zeros(0x110000, dtype=np.bool_)
    i = 0
    while i < len(data):
        if data[i] < 128:
            i += 1
            continue
        code, length = _decode(data, i)
        seen[code] = True
        i += length
    return np.flatnonzero(seen)


@numba.njit(cache=True)
def _collapse(data, strip_punctuation, zero_digits, actions):
    """Split at separators (U+E000), collapse whitespace to single spaces and trim each document. ASCII bytes are
    classified here (with `strip_punctuation` punctuation and `_` go, with `zero_digits` digits become 0); other
    characters by `actions[code point]`, decided in Python for the few distinct ones a batch has."""
    out = np.empty(len(data), dtype=np.uint8)
    offsets = [0]
    written, pending_space, document_empty = 0, False, True
    i = 0
    while i < len(data):
        byte = data[i]
        length, action = 1, _KEEP
        if byte >= 128:
            code, length = _decode(data, i)
            if code == 0xE000:
                offsets.append(written)
                pending_space, document_empty = False, True
                i += length
                continue
            action = actions[code]
        elif byte == 32 or 9 <= byte <= 13 or 28 <= byte <= 31:
            action = _SPACE
        elif strip_punctuation:
            if 48 <= byte <= 57:
                action = _ZERO if zero_digits else _KEEP
            elif not (97 <= byte <= 122 or 65 <= byte <= 90):
                action = _DELETE
        if action == _SPACE:
            pending_space = True
        elif action != _DELETE:
            if pending_space and not document_empty:
                out[written] = 32
                written += 1
            if action == _ZERO:
                out[written] = 48
                written += 1
            else:
                out[written : written + length] = data[i : i + length]
                written += length
            pending_space, document_empty = False, False
        i += length
    offsets.append(written)
    return out[:written], np.array(offsets, dtype=np.int64)


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
    data = np.frombuffer(batch.encode("utf-8"), dtype=np.uint8)
    actions = np.zeros(0x110000, dtype=np.uint8)
    if not batch.isascii():
        for code in _non_ascii(data).tolist():
            char = chr(code)
            if char.isspace():
                actions[code] = _SPACE
            elif mode == "fineweb" and char.isdecimal():
                actions[code] = _ZERO
            elif strip and not char.isalnum():
                actions[code] = _DELETE
    return _collapse(data, strip, mode == "fineweb", actions)


def normalize_batch(texts: list[str | None], mode: Normalization) -> list[str]:
    """`normalized_bytes` as one string per document."""
    buffer, offsets = normalized_bytes(texts, mode)
    data = buffer.tobytes()
    return [data[start:end].decode("utf-8") for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
