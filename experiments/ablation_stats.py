"""Whether an ablation's difference is real: paired intervals over seeds and documents, and accuracy against chance.

Two sources of noise separate two small runs: the seed (initialization and data order: a whole run lands higher or
lower) and the documents (another validation set would give another mean). Seed k of a variant is paired with seed
k of the base, and each document with itself, so both sides share what they can. The interval is a two-level
bootstrap of the paired differences: documents are resampled with replacement (one draw for every seed, since the
seeds score the same documents), and on each resample the seed level is drawn from Student's t with k-1 degrees of
freedom around the seeds' mean. The seed level is not resampled: with 3 seeds, resampling them puts the interval's
ends at the smallest and largest seed, so it excludes zero whenever all three pairs share a sign, which happens to
a quarter of variants identical to the base (tests/test_ablation_stats.py measures it).
"""

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
RESAMPLES = 4000


@dataclass(frozen=True)
class Interval:
    difference: float  # variant minus base, the seeds' mean
    low: float
    high: float
    per_seed: list[float]
    p_value: float = float("nan")  # two-sided, from the same draws: twice the smaller share of draws on one side of 0

    @property
    def resolved(self) -> bool:
        """The interval excludes zero."""
        return self.low > 0 or self.high < 0

    def to_json(self) -> dict:
        return asdict(self) | {"resolved": self.resolved}


def paired_interval(variant: np.ndarray, base: np.ndarray, weights: np.ndarray, seed: int = 0,
                    resamples: int = RESAMPLES, confidence: float = CONFIDENCE) -> Interval:  # fmt: skip
    """The interval of the weighted mean of variant - base. variant, base: (seeds, units) sums per unit (a
    document's summed loss, an item's 0/1 correctness), seed k of one paired with seed k of the other; weights:
    (units,) what each unit's sum is over (a document's tokens, 1 per item). Needs at least 2 seeds."""
    variant, base, weights = (np.asarray(a, dtype=np.float64) for a in (variant, base, weights))
    if variant.shape != base.shape or variant.ndim != 2 or variant.shape[1] != weights.shape[0]:
        raise ValueError(f"paired_interval: variant {variant.shape}, base {base.shape} and weights {weights.shape} do not pair")
    seeds, units = variant.shape
    if seeds < 2:
        raise ValueError(f"paired_interval: {seeds} seed(s): the seed-to-seed noise needs at least 2")
    differences = variant - base
    per_seed = differences.sum(axis=1) / weights.sum()
    rng = np.random.default_rng(seed)
    counts = unit_counts(units, resamples, rng)  # documents drawn, one row per resample
    draws = t_level_means(differences, counts, weights, rng)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    p_value = min(1.0, 2 * min(np.mean(draws <= 0), np.mean(draws >= 0)))
    return Interval(float(per_seed.mean()), float(low), float(high), [float(value) for value in per_seed], float(p_value))


def holm(p_values: list[float], level: float = 1 - CONFIDENCE) -> list[bool]:
    """Holm's step-down correction: which of several tests still reject at `level` taken together (the chance that
    any true null is rejected stays below it)."""
    rejected = [False] * len(p_values)
    for rank, index in enumerate(np.argsort(p_values, kind="stable")):
        if p_values[index] > level / (len(p_values) - rank):
            break
        rejected[index] = True
    return rejected


def t_level_means(sums: np.ndarray, counts: np.ndarray, weights: np.ndarray, rng) -> np.ndarray:
    """A run group's mean over seeds under each resample of the units (`counts`, one row per resample): the seeds'
    mean plus Student's t with seeds-1 degrees of freedom times its standard error, as `paired_interval` draws the
    seed level; one seed has no seed term."""
    per_seed = (counts @ sums.T) / (counts @ weights)[:, None]  # (resamples, seeds)
    seeds = per_seed.shape[1]
    if seeds < 2:
        return per_seed[:, 0]
    spread = per_seed.std(axis=1, ddof=1) / np.sqrt(seeds)
    return per_seed.mean(axis=1) + spread * rng.standard_t(seeds - 1, size=len(per_seed))


def unit_counts(units: int, resamples: int, rng) -> np.ndarray:
    """Units drawn with replacement, one row of counts per resample (a bincount of uniform draws: numpy's
    multinomial took 20x as long at 4,000 x 300)."""
    rows = np.arange(resamples)[:, None] * units
    return np.bincount((rows + rng.integers(0, units, (resamples, units))).ravel(), minlength=resamples * units).reshape(resamples, units)


def documents_to_resolve(interval: Interval, documents: int) -> int | None:
    """For a difference that is not resolved: the validation documents at which an interval of today's width,
    narrowing as 1/sqrt(documents) as its document term does, would just exclude zero around today's difference.
    The seed term does not narrow with documents, so it is a lower bound; None when resolved or no difference."""
    if interval.resolved or interval.difference == 0:
        return None
    half = (interval.high - interval.low) / 2
    return math.ceil(documents * (half / abs(interval.difference)) ** 2)


def at_chance(correct: int, items: int, chance: float, level: float = 0.05) -> bool:
    """Not significantly above chance: the exact one-sided binomial test at `level` does not reject guessing."""
    if items == 0:
        return True
    return bool(stats.binomtest(correct, items, chance, alternative="greater").pvalue >= level)
