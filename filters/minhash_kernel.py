"""MinHash signatures of word n-grams, compiled: the same numbers as `datasketch.MinHash`, many times faster.

datasketch hashes each shingle with SHA-1 in Python (`sha1_hash32`) and applies the permutations per document in
numpy; at web scale the Python call per shingle is the cost. Here compiled loops (filters/kernels.c) walk the
normalized bytes of a whole batch: a shingle is a slice between word boundaries; SHA-1 runs on 32 shingles at once in
lanes the compiler turns into SIMD (single-block shingles, nearly all of them; longer ones take a scalar path); the
permutations are datasketch's (`np.random.RandomState(seed)`) for its "affine32" scheme (the default since datasketch
2.0) and its "legacy" one (before 2.0), so a `LeanMinHash(seed=..., hashvalues=..., scheme=...)` rebuilt from ours
compares with any datasketch MinHash of the same shingles.
"""

import numpy as np

from filters.compiled_kernels import pointer, kernels

MERSENNE_PRIME = (1 << 61) - 1
MAX_HASH32 = (1 << 32) - 1


def permutations(num_perm: int, seed: int, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's `MinHash._init_permutations`, bit for bit."""
    gen = np.random.RandomState(seed)
    if scheme == "legacy":
        pairs = [
            (gen.randint(1, MERSENNE_PRIME, dtype=np.uint64), gen.randint(0, MERSENNE_PRIME, dtype=np.uint64))
            for _ in range(num_perm)
        ]
        a, b = np.array(pairs, dtype=np.uint64).T
        return a, b
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a.astype(np.uint64), b.astype(np.uint64)


def shingle_bounds(buf: np.ndarray, offsets: np.ndarray, ngram: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte ranges of each document's word n-grams (`buf[offsets[i]:offsets[i+1]]` is document i, words separated by
    single spaces), and where each document's shingles begin. A non-empty document shorter than n words is one
    shingle; an empty one has none."""
    if ngram < 1 or len(offsets) < 1:
        raise ValueError(f"shingle_bounds: ngram = {ngram} and {len(offsets)} offsets; >= 1 of each expected")
    buf, offsets = np.ascontiguousarray(buf, np.uint8), np.ascontiguousarray(offsets, np.int64)
    docs = len(offsets) - 1
    shingle_offsets = np.empty(docs + 1, dtype=np.int64)
    kernels().shingle_offsets(pointer(buf), pointer(offsets), docs, ngram, pointer(shingle_offsets))
    starts, ends = np.empty(shingle_offsets[-1], dtype=np.int64), np.empty(shingle_offsets[-1], dtype=np.int64)
    ring = np.empty(ngram, dtype=np.int64)  # starts of the last n words
    kernels().shingle_ranges(
        pointer(buf), pointer(offsets), docs, ngram, pointer(shingle_offsets), pointer(starts), pointer(ends), pointer(ring)
    )  # fmt: skip
    return shingle_offsets, starts, ends


def sha1_hash32_many(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """`sha1_hash32(buf[starts[i]:ends[i]])` for every i: the first four bytes of SHA-1 read little-endian."""
    buf, starts, ends = (np.ascontiguousarray(x, t) for x, t in ((buf, np.uint8), (starts, np.int64), (ends, np.int64)))
    out = np.empty(len(starts), dtype=np.uint32)
    kernels().sha1_hash32_many(pointer(buf), pointer(starts), pointer(ends), len(starts), pointer(out))
    return out


def signatures(hashes: np.ndarray, shingle_offsets: np.ndarray, a: np.ndarray, b: np.ndarray, legacy: bool) -> np.ndarray:
    """Documents x permutations: each document's minimum of every permutation over its shingle hashes."""
    hashes, shingle_offsets = np.ascontiguousarray(hashes, np.uint32), np.ascontiguousarray(shingle_offsets, np.int64)
    a, b = np.ascontiguousarray(a, np.uint64), np.ascontiguousarray(b, np.uint64)
    docs, num_perm = len(shingle_offsets) - 1, len(a)
    out, current = np.empty((docs, num_perm), dtype=np.uint32), np.empty(num_perm, dtype=np.uint64)
    kernels().minhash_signatures(
        pointer(hashes), pointer(shingle_offsets), docs, pointer(a), pointer(b), num_perm, int(legacy), pointer(out),
        pointer(current),
    )  # fmt: skip
    return out
