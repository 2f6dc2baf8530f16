"""How often a small-scale run's ranking of two data recipes holds at the largest scale (DataDecide's decision
accuracy), per metric, with an interval that does not over-claim.

Every metric is a weighted mean over units, lower is better: the target set's loss (units: documents, weights: their
tokens), an evaluation set's error rate (units: items, weight 1 each) and the right answer's negative log-probability
per character (units: items, weights: the answer's characters). A run's value is its units' sums over their weights;
a recipe's value at a scale is the mean over its seeds.

The truth for a pair is its order at the largest scale, and only where that order is resolved: the paired interval
of the difference (experiments.ablation_stats, seeds and units) excludes zero. A pair that is not resolved there has
no ground truth and is counted apart, never as a right or a wrong decision; so is a tie at the smaller scale (equal
means decide nothing). With many pairs some are resolved by chance alone: each truth also says whether it survives
Holm's correction over the pairs of its metric, and the expected count of chance resolutions is reported beside.

The interval of the accuracy is the hull of two: a bootstrap of what the observed accuracy depends on, the units
(one draw shared by every recipe and, where the truth is the same metric, by both scales, as they score the same
units) and each recipe's seed level at both scales (Student's t around the seeds' mean, as `paired_interval` draws
it), so the truths are redrawn with the decisions; and the Jeffreys interval of the count of right decisions, the
pairs taken as a binomial sample of the decision rule's accuracy. The second keeps one resolved pair from ever
giving [1, 1] (one right decision says little), which the bootstrap alone gives whenever both scales separate the
pair clearly. On synthetic decisions with a known truth (tests/test_decision_accuracy.py: 5 recipes, 3 seeds, 300
documents) the bootstrap alone covered the true accuracy in 0.985 of 200, the Jeffreys interval alone in 0.975, the
hull in all 200, 0.52 wide on average against the bootstrap's 0.49.
"""

import itertools

import numpy as np
from scipy import stats

from experiments.ablation_stats import CONFIDENCE, holm, paired_interval, t_level_means, unit_counts

RESAMPLES = 2000
TRUTHS = {"against_itself": "truth: the same metric at the largest scale",
          "against_target_loss": "truth: the target loss at the largest scale"}
Runs = dict[str, np.ndarray]  # recipe -> (seeds, units) per-unit sums of one metric at one scale


def recipe_value(sums: np.ndarray, weights: np.ndarray) -> dict:
    """A recipe's mean over seeds at one scale, with its 95% interval over seeds and units."""
    interval = paired_interval(sums, np.zeros_like(sums), weights) if len(sums) > 1 else None
    value = float((sums.sum(axis=1) / weights.sum()).mean())
    return {"value": value, "interval": [interval.low, interval.high] if interval else None, "seeds": len(sums)}


def truths(largest: Runs, weights: np.ndarray, resamples: int = 4000) -> dict[tuple[str, str], dict]:
    """Per pair (a, b) its difference a - b at the largest scale with its interval and p-value, `better` (the recipe
    with the lower value) where the interval excludes zero, else None, and whether it stays resolved under Holm's
    correction over all the pairs."""
    result = {}
    for a, b in itertools.combinations(sorted(largest), 2):
        interval = paired_interval(largest[a], largest[b], weights, resamples=resamples)
        better = (b if interval.difference > 0 else a) if interval.resolved else None
        result[a, b] = {"difference": interval.difference, "interval": [interval.low, interval.high],
                        "p_value": interval.p_value, "better": better}  # fmt: skip
    for pair, kept in zip(result, holm([verdict["p_value"] for verdict in result.values()])):
        result[pair]["resolved_holm"] = bool(kept and result[pair]["better"] is not None)
    return result


def chance_line(truth: dict) -> dict:
    """How many pairs the truths resolve, how many survive Holm's correction, and how many of them chance alone would
    resolve if no recipe differed from any other (each pair at 1 - CONFIDENCE)."""
    return {"pairs": len(truth), "resolved": sum(v["better"] is not None for v in truth.values()),
            "resolved_holm": sum(v["resolved_holm"] for v in truth.values()),
            "expected_by_chance": len(truth) * (1 - CONFIDENCE)}  # fmt: skip


def ranking(runs: Runs, weights: np.ndarray) -> list[str]:
    """The recipes from best (lowest mean over seeds) to worst."""
    return sorted(runs, key=lambda recipe: (runs[recipe].sum(axis=1) / weights.sum()).mean())


def decided(means: dict[str, float], pair: tuple[str, str]) -> str | None:
    """The recipe with the lower mean; None on a tie."""
    a, b = pair
    return None if means[a] == means[b] else (a if means[a] < means[b] else b)


def accuracy(runs: Runs, weights: np.ndarray, truth: dict[tuple[str, str], dict], largest: Runs, truth_weights: np.ndarray,
             same_units: bool, resamples: int = RESAMPLES, seed: int = 0, confidence: float = CONFIDENCE) -> dict:  # fmt: skip
    """The share of the resolved, untied pairs that this scale's means order as the truth does, with its interval;
    and each pair's decision. `largest`, `truth_weights`: the runs the truth was read from, redrawn with these;
    `same_units`: they score the same units as `runs` (the same metric), so one draw of units serves both."""
    means = {recipe: float((sums.sum(axis=1) / weights.sum()).mean()) for recipe, sums in runs.items()}
    decisions = {pair: decided(means, pair) for pair in truth}
    resolved = [pair for pair, verdict in truth.items() if verdict["better"] is not None]
    scored = [pair for pair in resolved if decisions[pair] is not None]
    right = sum(decisions[pair] == truth[pair]["better"] for pair in scored)
    result = {"pairs_resolved": len(resolved), "pairs_unresolved": len(truth) - len(resolved),
              "ties": len(resolved) - len(scored), "correct": right,
              "accuracy": right / len(scored) if scored else None, "interval": None,
              "pairs": [{"pair": list(pair), "decided": decisions[pair], "truth": truth[pair]["better"]} for pair in truth]}  # fmt: skip
    if scored:
        result["interval"] = accuracy_interval(runs, weights, largest, truth_weights, same_units, scored, right,
                                               resamples, seed, confidence)  # fmt: skip
    return result


def accuracy_interval(runs: Runs, weights: np.ndarray, largest: Runs, truth_weights: np.ndarray, same_units: bool,
                      pairs: list[tuple[str, str]], right: int, resamples: int, seed: int, confidence: float) -> list[float]:  # fmt: skip
    """The hull of the bootstrap interval over units and seeds at both scales and the Jeffreys interval of `right` of
    the pairs (module docstring)."""
    rng = np.random.default_rng(seed)
    counts = unit_counts(len(weights), resamples, rng)
    truth_counts = counts if same_units else unit_counts(len(truth_weights), resamples, rng)
    small = {recipe: t_level_means(sums, counts, weights, rng) for recipe, sums in sorted(runs.items())}
    large = {recipe: t_level_means(sums, truth_counts, truth_weights, rng) for recipe, sums in sorted(largest.items())}
    drawn_right, drawn_total = np.zeros(resamples), np.zeros(resamples)
    for a, b in pairs:
        decisive = (small[a] != small[b]) & (large[a] != large[b])  # a tie in a draw decides nothing
        drawn_right += decisive & ((small[a] < small[b]) == (large[a] < large[b]))
        drawn_total += decisive
    tail = (1 - confidence) / 2
    low, high = np.percentile(drawn_right / np.maximum(drawn_total, 1), [tail * 100, 100 - tail * 100])
    jeffreys_low, jeffreys_high = stats.beta.ppf([tail, 1 - tail], right + 0.5, len(pairs) - right + 0.5)
    return [float(min(low, jeffreys_low)), float(max(high, jeffreys_high))]


def split_units(units: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two random halves of a metric's units: one to choose on, the other to report on."""
    order = np.random.default_rng(seed).permutation(units)
    return np.sort(order[: units // 2]), np.sort(order[units // 2 :])
