"""The compiled passes of filters/normalization.py, apart so that a process that only plans a run (the driver) never
imports numba (0.2 s, 55 MiB)."""

from filters.numba_without_blas import numba
import numpy as np

KEEP, SPACE, DELETE, ZERO = 0, 1, 2, 3  # what collapse does with a character


@numba.njit(cache=True)
def decode(data, i):
    """The code point starting at byte i of valid UTF-8, and its length in bytes."""
    byte = data[i]
    if byte < 0xE0:
        return ((byte & 0x1F) << 6) | (data[i + 1] & 0x3F), 2
    if byte < 0xF0:
        return ((byte & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F), 3
    return ((byte & 0x07) << 18) | ((data[i + 1] & 0x3F) << 12) | ((data[i + 2] & 0x3F) << 6) | (data[i + 3] & 0x3F), 4


@numba.njit(cache=True)
def non_ascii(data):
    """The distinct non-ASCII code points of a UTF-8 buffer."""
    seen = np.zeros(0x110000, dtype=np.bool_)
    i = 0
    while i < len(data):
        if data[i] < 128:
            i += 1
            continue
        code, length = decode(data, i)
        seen[code] = True
        i += length
    return np.flatnonzero(seen)


@numba.njit(cache=True)
def collapse(data, strip_punctuation, zero_digits, actions):
    """Split at separators (U+E000), collapse whitespace to single spaces and trim each document. ASCII bytes are
    classified here (with `strip_punctuation` punctuation and `_` go, with `zero_digits` digits become 0); other
    characters by `actions[code point]`, decided in Python for the few distinct ones a batch has."""
    out = np.empty(len(data), dtype=np.uint8)
    offsets = [0]
    written, pending_space, document_empty = 0, False, True
    i = 0
    while i < len(data):
        byte = data[i]
        length, action = 1, KEEP
        if byte >= 128:
            code, length = decode(data, i)
            if code == 0xE000:
                offsets.append(written)
                pending_space, document_empty = False, True
                i += length
                continue
            action = actions[code]
        elif byte == 32 or 9 <= byte <= 13 or 28 <= byte <= 31:
            action = SPACE
        elif strip_punctuation:
            if 48 <= byte <= 57:
                action = ZERO if zero_digits else KEEP
            elif not (97 <= byte <= 122 or 65 <= byte <= 90):
                action = DELETE
        if action == SPACE:
            pending_space = True
        elif action != DELETE:
            if pending_space and not document_empty:
                out[written] = 32
                written += 1
            if action == ZERO:
                out[written] = 48
                written += 1
            else:
                out[written : written + length] = data[i : i + length]
                written += length
            pending_space, document_empty = False, False
        i += length
    offsets.append(written)
    return out[:written], np.array(offsets, dtype=np.int64)
