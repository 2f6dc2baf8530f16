"""The compiled n-gram counting of filters/heuristics.py (Gopher's repetition rules), apart so that a process that
only plans a run (the driver) never imports numba (0.2 s, 55 MiB)."""

from filters.numba_without_blas import numba
import numpy as np

HASH_BASE = np.uint64(0x100000001B3)  # FNV's prime: n-gram hashes for the tables of find


@numba.njit(cache=True)
def empty_slots(count: int) -> np.ndarray:
    """An open-addressing table for `count` keys: each slot holds the position of a first occurrence, or -1."""
    size = 16
    while size < 2 * count:
        size *= 2
    return np.full(size, -1, np.int64)


@numba.njit(cache=True)
def gram_hashes(values: np.ndarray, ends: np.ndarray, n: int) -> np.ndarray:
    """A hash of values[ends[i]:ends[i + n]] for each i (polynomial, wrapping uint64): equal slices hash alike."""
    prefix = np.zeros(len(values) + 1, np.uint64)
    power = np.ones(len(values) + 1, np.uint64)
    for k in range(len(values)):
        prefix[k + 1] = prefix[k] * HASH_BASE + np.uint64(values[k]) + np.uint64(1)
        power[k + 1] = power[k] * HASH_BASE
    hashes = np.empty(len(ends) - n, np.uint64)
    for i in range(len(hashes)):
        a, b = ends[i], ends[i + n]
        hashes[i] = prefix[b] - prefix[a] * power[b - a]
    return hashes


@numba.njit(cache=True)
def same(values: np.ndarray, a: int, b: int, c: int, d: int) -> bool:
    if b - a != d - c:
        return False
    for k in range(b - a):
        if values[a + k] != values[c + k]:
            return False
    return True


@numba.njit(cache=True)
def find(slots, hashes, values, ends, n, i) -> int:
    """The slot of the n-gram at i: the one holding an equal n-gram, else the empty slot where it belongs."""
    mask = np.uint64(len(slots) - 1)
    slot = (hashes[i] ^ (hashes[i] >> np.uint64(32))) & mask
    while slots[slot] != -1:
        j = slots[slot]
        if hashes[j] == hashes[i] and same(values, ends[j], ends[j + n], ends[i], ends[i + n]):
            return slot
        slot = (slot + np.uint64(1)) & mask
    return slot


@numba.njit(cache=True)
def top_gram_chars(orths: np.ndarray, ends: np.ndarray, n: int) -> int:
    """datatrove's find_top_duplicate on " "-joined n-grams: characters of the most frequent one times its count, of
    tied ones the first seen (Counter.most_common(1)). Words hold no whitespace (spaCy splits there), so n-grams
    joined with spaces are equal exactly when their words (orths) are."""
    positions = np.arange(len(orths) + 1)
    hashes = gram_hashes(orths, positions, n)
    slots, counts = empty_slots(len(hashes)), np.zeros(len(hashes), np.int64)
    for i in range(len(hashes)):
        slot = find(slots, hashes, orths, positions, n, i)
        if slots[slot] == -1:
            slots[slot] = i
        counts[slots[slot]] += 1
    top = np.argmax(counts)
    return (ends[top + n] - ends[top] + n - 1) * counts[top]


@numba.njit(cache=True)
def repeated_chars(joined: np.ndarray, ends: np.ndarray, n: int) -> int:
    """datatrove's find_all_duplicate: characters of repeated ""-joined n-grams (so "ab c" repeats "a bc"), where a
    repeat counts and its n words are skipped, unremembered. joined: the code points of "".join(words); word i is
    joined[ends[i]:ends[i + 1]]."""
    hashes = gram_hashes(joined, ends, n)
    slots, repeated, index = empty_slots(len(hashes)), 0, 0
    while index < len(hashes):
        slot = find(slots, hashes, joined, ends, n, index)
        if slots[slot] == -1:
            slots[slot] = index
            index += 1
        else:
            repeated += ends[index + n] - ends[index]
            index += n
    return repeated
