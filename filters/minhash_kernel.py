"""MinHash signatures of word n-grams, compiled: the same numbers as `datasketch.MinHash`, many times faster.

datasketch hashes each shingle with SHA-1 in Python (`sha1_hash32`) and applies the permutations per document in
numpy; at web scale the Python call per shingle is the cost. Here compiled loops walk the normalized bytes of a
whole batch: a shingle is a slice between word boundaries; SHA-1 runs on 32 shingles at once in lanes the compiler
turns into SIMD (single-block shingles, nearly all of them; longer ones take a scalar path); the permutations are
datasketch's (`np.random.RandomState(seed)`) for its "affine32" scheme (the default since datasketch 2.0) and its
"legacy" one (before 2.0), so a `LeanMinHash(seed=..., hashvalues=..., scheme=...)` rebuilt from ours compares
with any datasketch MinHash of the same shingles.
"""

from filters.numba_without_blas import numba
import numpy as np

MERSENNE_PRIME = (1 << 61) - 1
MAX_HASH32 = (1 << 32) - 1
_M32 = np.uint64(MAX_HASH32)


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


_LANES = 32
_U32 = np.uint32


@numba.njit(cache=True, inline="always")
def _rotl(x, n):
    return ((x << np.uint64(n)) | (x >> np.uint64(32 - n))) & _M32


@numba.njit(cache=True, inline="always")
def _rotl32(x, n):
    return _U32((x << _U32(n)) | (x >> _U32(32 - n)))


@numba.njit(cache=True, inline="always")
def _little_endian(h0):
    return ((h0 & 0xFF) << 24) | ((h0 & 0xFF00) << 8) | ((h0 >> 8) & 0xFF00) | (h0 >> 24)


@numba.njit(cache=True)
def _sha1_hash32(buf, start, end, w):
    """First four bytes of SHA-1(buf[start:end]) read little-endian, as datasketch's `sha1_hash32`."""
    length = end - start
    total = ((length + 8) // 64 + 1) * 64
    h0, h1, h2, h3, h4 = (
        np.uint64(0x67452301), np.uint64(0xEFCDAB89), np.uint64(0x98BADCFE), np.uint64(0x10325476), np.uint64(0xC3D2E1F0)
    )  # fmt: skip
    bit_length = np.uint64(length) * np.uint64(8)
    for block in range(0, total, 64):
        for i in range(16):
            position = block + 4 * i
            if position + 4 <= length:
                q = start + position
                w[i] = (np.uint64(buf[q]) << np.uint64(24)) | (np.uint64(buf[q + 1]) << np.uint64(16)) | (
                    np.uint64(buf[q + 2]) << np.uint64(8)
                ) | np.uint64(buf[q + 3])
                continue
            word = np.uint64(0)
            for j in range(4):
                p = position + j
                if p < length:
                    byte = np.uint64(buf[start + p])
                elif p == length:
                    byte = np.uint64(0x80)
                elif p >= total - 8:
                    byte = (bit_length >> np.uint64(8 * (total - 1 - p))) & np.uint64(0xFF)
                else:
                    byte = np.uint64(0)
                word = (word << np.uint64(8)) | byte
            w[i] = word
        for i in range(16, 80):
            w[i] = _rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1)
        a, b, c, d, e = h0, h1, h2, h3, h4
        for i in range(20):
            temp = (_rotl(a, 5) + ((b & c) | ((~b & _M32) & d)) + e + np.uint64(0x5A827999) + w[i]) & _M32
            e, d, c, b, a = d, c, _rotl(b, 30), a, temp
        for i in range(20, 40):
            temp = (_rotl(a, 5) + (b ^ c ^ d) + e + np.uint64(0x6ED9EBA1) + w[i]) & _M32
            e, d, c, b, a = d, c, _rotl(b, 30), a, temp
        for i in range(40, 60):
            temp = (_rotl(a, 5) + ((b & c) | (b & d) | (c & d)) + e + np.uint64(0x8F1BBCDC) + w[i]) & _M32
            e, d, c, b, a = d, c, _rotl(b, 30), a, temp
        for i in range(60, 80):
            temp = (_rotl(a, 5) + (b ^ c ^ d) + e + np.uint64(0xCA62C1D6) + w[i]) & _M32
            e, d, c, b, a = d, c, _rotl(b, 30), a, temp
        h0, h1, h2, h3, h4 = (h0 + a) & _M32, (h1 + b) & _M32, (h2 + c) & _M32, (h3 + d) & _M32, (h4 + e) & _M32
    return _little_endian(h0)


@numba.njit(cache=True)
def shingle_bounds(buf, offsets, ngram):
    """Byte ranges of each document's word n-grams (`buf[offsets[i]:offsets[i+1]]` is document i, words separated by
    single spaces), and where each document's shingles begin. A non-empty document shorter than n words is one
    shingle; an empty one has none."""
    docs = len(offsets) - 1
    shingle_offsets = np.zeros(docs + 1, dtype=np.int64)
    for doc in range(docs):
        start, end = offsets[doc], offsets[doc + 1]
        count = 0
        if end > start:
            words = 1
            for i in range(start, end):
                if buf[i] == 32:
                    words += 1
            count = max(words - ngram + 1, 1)
        shingle_offsets[doc + 1] = shingle_offsets[doc] + count
    starts = np.empty(shingle_offsets[-1], dtype=np.int64)
    ends = np.empty(shingle_offsets[-1], dtype=np.int64)
    ring = np.empty(ngram, dtype=np.int64)  # starts of the last n words
    for doc in range(docs):
        start, end = offsets[doc], offsets[doc + 1]
        slot = shingle_offsets[doc]
        if end == start:
            continue
        if shingle_offsets[doc + 1] - slot == 1:  # at most n words: the whole document
            starts[slot], ends[slot] = start, end
            continue
        ring[0] = start
        word = 0
        for i in range(start, end + 1):
            if i < end and buf[i] != 32:
                continue
            if word >= ngram - 1:
                starts[slot], ends[slot] = ring[(word - ngram + 1) % ngram], i
                slot += 1
            word += 1
            if i < end:
                ring[word % ngram] = i + 1
    return shingle_offsets, starts, ends


@numba.njit(cache=True, inline="always")
def _rounds(A, B, C, D, E, W, first, k, kind):
    """Twenty SHA-1 rounds on every lane; `kind` (choose, parity, majority) is the same for the whole loop, so the
    compiler lifts the branch out and the lane loop vectorizes."""
    for t in range(first, first + 20):
        for lane in range(_LANES):
            b, c, d = B[lane], C[lane], D[lane]
            if kind == 0:
                f = _U32((b & c) | (~b & d))
            elif kind == 1:
                f = _U32(b ^ c ^ d)
            else:
                f = _U32((b & c) | (b & d) | (c & d))
            temp = _U32(_rotl32(A[lane], 5) + f + E[lane] + _U32(k) + W[t, lane])
            E[lane], D[lane], C[lane], B[lane], A[lane] = d, c, _rotl32(b, 30), A[lane], temp


@numba.njit(cache=True)
def sha1_hash32_many(buf, starts, ends):
    """`sha1_hash32(buf[starts[i]:ends[i]])` for every i: 32 single-block messages at a time, lane by lane."""
    count = len(starts)
    out = np.empty(count, dtype=np.uint32)
    short = np.empty(count, dtype=np.int64)
    shorts = 0
    w = np.empty(80, dtype=np.uint64)
    for i in range(count):
        if ends[i] - starts[i] <= 55:
            short[shorts] = i
            shorts += 1
        else:
            out[i] = _sha1_hash32(buf, starts[i], ends[i], w)
    block = np.zeros(64, dtype=np.uint8)
    W = np.zeros((80, _LANES), dtype=np.uint32)
    A, B, C = np.empty(_LANES, dtype=np.uint32), np.empty(_LANES, dtype=np.uint32), np.empty(_LANES, dtype=np.uint32)
    D, E = np.empty(_LANES, dtype=np.uint32), np.empty(_LANES, dtype=np.uint32)
    for group in range(0, shorts, _LANES):
        for lane in range(_LANES):
            index = short[min(group + lane, shorts - 1)]
            start, length = starts[index], ends[index] - starts[index]
            block[:] = 0
            block[:length] = buf[start : start + length]
            block[length] = 0x80
            block[62], block[63] = (length * 8) >> 8, (length * 8) & 0xFF
            for i in range(16):
                W[i, lane] = (
                    (_U32(block[4 * i]) << 24) | (_U32(block[4 * i + 1]) << 16) | (_U32(block[4 * i + 2]) << 8)
                ) | _U32(block[4 * i + 3])
        for t in range(16, 80):
            for lane in range(_LANES):
                W[t, lane] = _rotl32(W[t - 3, lane] ^ W[t - 8, lane] ^ W[t - 14, lane] ^ W[t - 16, lane], 1)
        A[:], B[:], C[:], D[:], E[:] = 0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0
        _rounds(A, B, C, D, E, W, 0, 0x5A827999, 0)
        _rounds(A, B, C, D, E, W, 20, 0x6ED9EBA1, 1)
        _rounds(A, B, C, D, E, W, 40, 0x8F1BBCDC, 2)
        _rounds(A, B, C, D, E, W, 60, 0xCA62C1D6, 1)
        for lane in range(min(_LANES, shorts - group)):
            out[short[group + lane]] = _little_endian(_U32(A[lane] + _U32(0x67452301)))
    return out


@numba.njit(cache=True)
def _fmix32(h):
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & _M32
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & _M32
    return h ^ (h >> np.uint64(16))


@numba.njit(cache=True)
def signatures(hashes, shingle_offsets, a, b, legacy):
    """Documents x permutations: each document's minimum of every permutation over its shingle hashes."""
    num_perm = len(a)
    out = np.full((len(shingle_offsets) - 1, num_perm), MAX_HASH32, dtype=np.uint32)
    current = np.empty(num_perm, dtype=np.uint64)
    prime = np.uint64(MERSENNE_PRIME)
    for doc in range(len(shingle_offsets) - 1):
        current[:] = MAX_HASH32
        for slot in range(shingle_offsets[doc], shingle_offsets[doc + 1]):
            hv = np.uint64(hashes[slot])
            if legacy:
                for k in range(num_perm):
                    x = a[k] * hv + b[k]  # wraps at 2**64 as datasketch's numpy does, then mod the Mersenne prime
                    x = (x & prime) + (x >> np.uint64(61))
                    if x >= prime:
                        x -= prime
                    current[k] = min(current[k], x & _M32)
            else:
                hv = _fmix32(hv)
                for k in range(num_perm):
                    current[k] = min(current[k], (a[k] * hv + b[k]) & _M32)
        out[doc] = current
    return out
