"""The compiled passes of filters/normalization.py, in filters/kernels.c: UTF-8 decoded in place, one pass each."""

import numpy as np

from filters.compiled_kernels import pointer, checked, kernels

KEEP, SPACE, DELETE, ZERO = 0, 1, 2, 3  # what collapse does with a character


def non_ascii(data: np.ndarray) -> np.ndarray:
    """The distinct non-ASCII code points of a UTF-8 buffer, ascending."""
    data = np.ascontiguousarray(data, np.uint8)
    out = np.empty(min(len(data) // 2, 0x110000) + 1, dtype=np.int64)  # each takes two bytes or more
    return out[: checked(kernels().non_ascii(pointer(data), len(data), pointer(out)), "non_ascii")]


def collapse(data: np.ndarray, strip_punctuation: bool, zero_digits: bool, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split at separators (U+E000), collapse whitespace to single spaces and trim each document. ASCII bytes are
    classified there (with `strip_punctuation` punctuation and `_` go, with `zero_digits` digits become 0); other
    characters by `actions[code point]` (0x110000 values), decided in Python for the few distinct ones a batch has."""
    data, actions = np.ascontiguousarray(data, np.uint8), np.ascontiguousarray(actions, np.uint8)
    if len(actions) != 0x110000:
        raise ValueError(f"collapse: actions holds {len(actions)} values, one per code point (0x110000) expected")
    out = np.empty(len(data), dtype=np.uint8)
    offsets = np.empty(len(data) // 3 + 2, dtype=np.int64)  # a separator is 3 bytes
    documents = np.zeros(1, dtype=np.int64)
    written = kernels().collapse(
        pointer(data), len(data), int(strip_punctuation), int(zero_digits), pointer(actions), pointer(out),
        pointer(offsets), pointer(documents),
    )  # fmt: skip
    return out[:written], offsets[: documents[0]]
