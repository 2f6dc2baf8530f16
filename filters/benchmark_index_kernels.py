"""The compiled n-gram hashing of filters/benchmark_index.py, in filters/kernels.c."""

import numpy as np

from filters.compiled_kernels import pointer, kernels


def ngram_hashes(buffer: np.ndarray, offsets: np.ndarray, n: int, bitmap: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hashes of every run of n words of each document (`buffer[offsets[i]:offsets[i+1]]`, single spaces), with the
    document and the first word of each: word FNV-1a hashes, combined as a polynomial rolled over the words. With a
    non-empty `bitmap` (bit `hash >> (64 - log2 bits)` set for every indexed hash) only hashes whose bit is set come
    out, so a lookup touches one bit per n-gram instead of searching the index."""
    if n < 1 or len(offsets) < 1:
        raise ValueError(f"ngram_hashes: n = {n} and {len(offsets)} offsets; n >= 1 and at least one offset expected")
    buffer, offsets = np.ascontiguousarray(buffer, np.uint8), np.ascontiguousarray(offsets, np.int64)
    bitmap = np.ascontiguousarray(bitmap, np.uint64)
    ring = np.empty(n, dtype=np.uint64)
    words = len(buffer) // 2 + 1  # one n-gram per word at most
    capacity = 1024 + words // 32 if len(bitmap) else words  # a bitmap passes ~1-2% by chance, else a second pass
    while True:
        hashes, docs, starts = np.empty(capacity, np.uint64), np.empty(capacity, np.int64), np.empty(capacity, np.int64)
        found = kernels().ngram_hashes(
            pointer(buffer), pointer(offsets), len(offsets) - 1, n, pointer(bitmap), len(bitmap), capacity,
            pointer(hashes), pointer(docs), pointer(starts), pointer(ring),
        )  # fmt: skip
        if found <= capacity:
            return hashes[:found], docs[:found], starts[:found]
        capacity = found
