"""The compiled n-gram hashing of filters/benchmark_index.py, apart so that a process that only plans a run (the
driver) never imports numba (0.2 s, 55 MiB)."""

from filters.numba_without_blas import numba
import numpy as np


@numba.njit(cache=True)
def ngram_hashes(buffer, offsets, n, bitmap):
    """Hashes of every run of n words of each document (`buffer[offsets[i]:offsets[i+1]]`, single spaces), with the
    document and the first word of each: word FNV-1a hashes, combined as a polynomial rolled over the words. With a
    non-empty `bitmap` (bit `hash >> (64 - log2 bits)` set for every indexed hash) only hashes whose bit is set come
    out, so a lookup touches one bit per n-gram instead of searching the index."""
    base = np.uint64(0x9E3779B97F4A7C15)
    top = np.uint64(1)
    for _ in range(n - 1):
        top *= base
    shift = np.uint64(64 - int(np.log2(len(bitmap) * 64))) if len(bitmap) else np.uint64(0)
    capacity = 1024
    hashes = np.empty(capacity, dtype=np.uint64)
    docs = np.empty(capacity, dtype=np.int64)
    starts = np.empty(capacity, dtype=np.int64)
    ring = np.empty(n, dtype=np.uint64)
    out = 0
    for doc in range(len(offsets) - 1):
        start, end = offsets[doc], offsets[doc + 1]
        if end == start:
            continue
        rolling = np.uint64(0)
        word = 0
        value = np.uint64(0xCBF29CE484222325)
        for i in range(start, end + 1):
            if i < end and buffer[i] != 32:
                value = (value ^ np.uint64(buffer[i])) * np.uint64(0x100000001B3)
                continue
            if word >= n:
                rolling -= ring[word % n] * top
            rolling = rolling * base + value
            ring[word % n] = value
            word += 1
            value = np.uint64(0xCBF29CE484222325)
            if word < n:
                continue
            if len(bitmap):
                bit = rolling >> shift
                if not (bitmap[bit >> np.uint64(6)] >> (bit & np.uint64(63))) & np.uint64(1):
                    continue
            if out == capacity:
                capacity *= 2
                hashes, docs, starts = _grow(hashes, capacity), _grow(docs, capacity), _grow(starts, capacity)
            hashes[out], docs[out], starts[out] = rolling, doc, word - n
            out += 1
    return hashes[:out], docs[:out], starts[:out]


@numba.njit(cache=True)
def _grow(array, capacity):
    grown = np.empty(capacity, dtype=array.dtype)
    grown[: len(array)] = array
    return grown
