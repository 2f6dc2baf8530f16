"""Document pairs at a measured word 5-gram Jaccard, for scoring duplicate removal against the truth.

Each pair is an original of random words and a copy with words replaced at random positions; the number of
replacements is searched so the copy's shingle-set Jaccard with its original lands on a drawn target. Pairs
share no vocabulary by chance beyond what a 50,000-word vocabulary gives, so documents of different pairs are
far apart: any pair the stage joins across pairs is a false positive too.
"""

import random
from dataclasses import dataclass


@dataclass
class Pair:
    original: str
    copy: str
    jaccard: float  # of the word n-gram sets, n as asked


def shingles(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(max(1, len(words) - n + 1))}


def jaccard(left: list[str], right: list[str], n: int = 5) -> float:
    a, b = shingles(left, n), shingles(right, n)
    return len(a & b) / len(a | b)


def near_duplicate_pairs(count: int, low: float, high: float, seed: int = 0, words: tuple[int, int] = (150, 400), n: int = 5) -> list[Pair]:
    """`count` pairs whose Jaccard is drawn uniformly from [low, high] (landing within a replaced word of it)."""
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10))) for _ in range(50_000)]
    pairs = []
    for _ in range(count):
        original = rng.choices(vocabulary, k=rng.randint(*words))
        target = rng.uniform(low, high)
        positions = rng.sample(range(len(original)), len(original))
        replacements = rng.choices(vocabulary, k=len(original))

        def edited(k: int) -> list[str]:
            copy = list(original)
            for position, word in zip(positions[:k], replacements):
                copy[position] = word
            return copy

        lo, hi = 0, len(original)  # the fewest replacements that bring the Jaccard to the target or under
        while lo < hi:
            mid = (lo + hi) // 2
            if jaccard(original, edited(mid), n) <= target:
                hi = mid
            else:
                lo = mid + 1
        copy = edited(lo)
        pairs.append(Pair(" ".join(original), " ".join(copy), jaccard(original, copy, n)))
    return pairs
