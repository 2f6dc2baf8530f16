"""The compiled n-gram counting of filters/heuristics.py (Gopher's repetition rules), in filters/kernels.c: n-grams
hashed as a rolling polynomial and counted in an open-addressing table of first occurrences."""

import numpy as np

from filters.compiled_kernels import pointer, checked, kernels


def top_gram_chars(orths: np.ndarray, ends: np.ndarray, n: int) -> int:
    """datatrove's find_top_duplicate on " "-joined n-grams: characters of the most frequent one times its count, of
    tied ones the first seen (Counter.most_common(1)). Words hold no whitespace (spaCy splits there), so n-grams
    joined with spaces are equal exactly when their words (orths) are; ends[i] is where word i starts in "".join."""
    _positive(n)
    orths, ends = np.ascontiguousarray(orths, np.uint64), np.ascontiguousarray(ends, np.int64)
    return checked(kernels().top_gram_chars(pointer(orths), len(orths), pointer(ends), n), "top_gram_chars")


def repeated_chars(joined: np.ndarray, ends: np.ndarray, n: int) -> int:
    """datatrove's find_all_duplicate: characters of repeated ""-joined n-grams (so "ab c" repeats "a bc"), where a
    repeat counts and its n words are skipped, unremembered. joined: the code points of "".join(words); word i is
    joined[ends[i]:ends[i + 1]]."""
    _positive(n)
    joined, ends = np.ascontiguousarray(joined, np.uint64), np.ascontiguousarray(ends, np.int64)
    return checked(
        kernels().repeated_chars(pointer(joined), len(joined), pointer(ends), len(ends), n), "repeated_chars"
    )  # fmt: skip


def _positive(n: int) -> None:
    if n < 1:
        raise ValueError(f"n-grams of n = {n} words: n >= 1 expected")
