"""How often a small-scale run's ranking of two data recipes holds at the largest scale (DataDecide's decision
accuracy), per metric, with a bootstrap interval.

Every metric is a weighted mean over units, lower is better: the target set's loss (units: documents, weights: their
tokens), an evaluation set's error rate (units: items, weight 1 each) and the right answer's negative log-probability
per character (units: items, weights: the answer's characters). A run's value is its units' sums over their weights;
a recipe's value at a scale is the mean over its seeds.

The truth for a pair is its order at the largest scale, and only where that order is resolved: the paired interval
of the difference (experiments.ablation_stats, seeds and units) excludes zero. A pair that is not resolved there has
no ground truth and is counted apart, never as a right or a wrong decision. At a smaller scale the decision is the
order of the two recipes' means. The interval of the accuracy resamples the smaller runs' units (the same draw for
every recipe, as they score the same units) and their seeds (with replacement, per recipe); the pairs and their
truths are the experiment's own and are not resampled.
"""

import itertools

import numpy as np

from experiments.ablation_stats import CONFIDENCE, paired_interval

RESAMPLES = 2000
TRUTHS = {"against_itself": "truth: the same metric at the largest scale",
          "against_target_loss": "truth: the target loss at the largest scale"}
Runs = dict[str, np.ndarray]  # recipe -> (seeds, units) per-unit sums of one metric at one scale


def recipe_value(sums: np.ndarray, weights: np.ndarray) -> dict:
    """A recipe's mean over seeds at one scale, with its 95% interval over seeds and units."""
    interval = paired_interval(sums, np.zeros_like(sums), weights) if len(sums) > 1 else None
    value = float((sums.sum(axis=1) / weights.sum()).mean())
    return {"value": value, "interval": [interval.low, interval.high] if interval else None, "seeds": len(sums)}


def truths(largest: Runs, weights: np.ndarray) -> dict[tuple[str, str], dict]:
    """Per pair (a, b) its difference a - b at the largest scale with its interval, and `better` (the recipe with the
    lower value) where the interval excludes zero, else None."""
    result = {}
    for a, b in itertools.combinations(sorted(largest), 2):
        interval = paired_interval(largest[a], largest[b], weights)
        better = (b if interval.difference > 0 else a) if interval.resolved else None
        result[a, b] = {"difference": interval.difference, "interval": [interval.low, interval.high], "better": better}
    return result


def ranking(runs: Runs, weights: np.ndarray) -> list[str]:
    """The recipes from best (lowest mean over seeds) to worst."""
    return sorted(runs, key=lambda recipe: (runs[recipe].sum(axis=1) / weights.sum()).mean())


def accuracy(runs: Runs, weights: np.ndarray, truth: dict[tuple[str, str], dict], resamples: int = RESAMPLES,
             seed: int = 0, confidence: float = CONFIDENCE) -> dict:  # fmt: skip
    """The share of the resolved pairs that this scale's means order as the truth does, with its bootstrap interval;
    and each pair's decision."""
    resolved = [pair for pair, verdict in truth.items() if verdict["better"] is not None]
    means = {recipe: (sums.sum(axis=1) / weights.sum()).mean() for recipe, sums in runs.items()}
    decisions = {pair: (pair[0] if means[pair[0]] < means[pair[1]] else pair[1]) for pair in truth}
    right = sum(decisions[pair] == truth[pair]["better"] for pair in resolved)
    result = {"pairs_resolved": len(resolved), "pairs_unresolved": len(truth) - len(resolved), "correct": right,
              "accuracy": right / len(resolved) if resolved else None, "interval": None,
              "pairs": [{"pair": list(pair), "decided": decisions[pair], "truth": truth[pair]["better"]} for pair in truth]}  # fmt: skip
    if not resolved:
        return result
    draws = resampled_means(runs, weights, resamples, seed)
    correct = np.zeros(resamples)
    for a, b in resolved:
        correct += np.where(draws[a] < draws[b], a, b) == truth[a, b]["better"]
    tail = (1 - confidence) / 2 * 100
    result["interval"] = [float(value) for value in np.percentile(correct / len(resolved), [tail, 100 - tail])]
    return result


def resampled_means(runs: Runs, weights: np.ndarray, resamples: int, seed: int) -> dict[str, np.ndarray]:
    """Each recipe's mean over seeds under `resamples` draws of the units (shared by all recipes) and of its seeds."""
    rng = np.random.default_rng(seed)
    units = len(weights)
    counts = rng.multinomial(units, np.full(units, 1 / units), size=resamples)
    totals = counts @ weights
    means = {}
    for recipe, sums in sorted(runs.items()):
        per_seed = (counts @ sums.T) / totals[:, None]  # (resamples, seeds)
        picks = rng.integers(0, per_seed.shape[1], size=per_seed.shape)
        means[recipe] = np.take_along_axis(per_seed, picks, axis=1).mean(axis=1)
    return means
