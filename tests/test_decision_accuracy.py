"""Decision accuracy on synthetic runs whose truth is known (experiments/decision_accuracy.py)."""

import itertools

import numpy as np
from scipy import stats

from experiments import decision_accuracy

UNITS, SEEDS = 200, 3


def runs_at(rng, means: dict[str, float], seed_noise: float = 0.02, unit_noise: float = 0.5, units: int = UNITS,
            seeds: int = SEEDS) -> dict[str, np.ndarray]:  # fmt: skip
    """Per recipe (seeds, units) sums of a per-token loss: every unit has its own difficulty (shared by recipes, as
    the same documents are scored), each seed shifts a whole run, each recipe adds its mean."""
    difficulty = rng.normal(0, unit_noise, units)
    return {recipe: (mean + difficulty + rng.normal(0, seed_noise, (seeds, 1)) + rng.normal(0, 0.05, (seeds, units)))
            for recipe, mean in means.items()}  # fmt: skip


def scored(runs, largest, weights, resamples=300, seed=0) -> dict:
    truth = decision_accuracy.truths(largest, weights, resamples=1000)
    return decision_accuracy.accuracy(runs, weights, truth, largest, weights, True, resamples=resamples, seed=seed)


def test_a_recipe_better_at_every_scale_is_always_ranked_first():
    rng = np.random.default_rng(0)
    weights = np.ones(UNITS)
    for trial in range(20):
        scales = [runs_at(rng, {"good": 3.0 - 0.1 * s, "plain": 3.2 - 0.1 * s, "other": 3.3 - 0.1 * s}) for s in range(3)]
        truth = decision_accuracy.truths(scales[-1], weights)
        assert truth["good", "other"]["better"] == "good" and truth["good", "plain"]["better"] == "good"
        for runs in scales:
            assert decision_accuracy.ranking(runs, weights)[0] == "good"
            found = scored(runs, scales[-1], weights, resamples=200, seed=trial)
            good_pairs = [p for p in found["pairs"] if "good" in p["pair"]]
            assert all(p["decided"] == "good" == p["truth"] for p in good_pairs)


def test_identical_recipes_are_rarely_called_different_and_never_scored():
    """Two identical recipes are resolved at the largest scale at most at the 5% rate (binomial slack), and a pair
    that is not resolved is counted apart: it neither helps nor hurts the accuracy."""
    rng = np.random.default_rng(1)
    units = 50
    weights = np.ones(units)
    trials, called = 300, 0
    for _ in range(trials):
        largest = runs_at(rng, {"a": 3.0, "b": 3.0}, units=units)
        verdict = decision_accuracy.truths(largest, weights)["a", "b"]
        called += verdict["better"] is not None
        if verdict["better"] is None:
            found = decision_accuracy.accuracy(runs_at(rng, {"a": 3.0, "b": 3.0}, units=units), weights,
                                               {("a", "b"): verdict}, largest, weights, True)  # fmt: skip
            assert found["accuracy"] is None and found["pairs_unresolved"] == 1 and found["pairs_resolved"] == 0
    assert called / trials <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / trials)


def test_a_smaller_scale_that_flips_the_order_is_scored_wrong_with_an_interval():
    rng = np.random.default_rng(2)
    weights = np.ones(UNITS)
    largest = runs_at(rng, {"a": 3.0, "b": 3.2, "c": 3.4})
    found = scored(runs_at(rng, {"a": 3.4, "b": 3.2, "c": 3.0}), largest, weights)  # every pair in the wrong order
    assert found["pairs_resolved"] == 3 and found["accuracy"] == 0.0
    assert found["interval"][0] < 0.01 < found["interval"][1] < 0.6  # three wrong decisions: low, but not a point
    noisy = runs_at(rng, {"a": 3.0, "b": 3.005, "c": 3.4}, seed_noise=0.05)  # a and b too close to order reliably
    interval = scored(noisy, largest, weights, resamples=500)["interval"]
    assert interval[0] < interval[1] and interval[0] <= 2 / 3


def test_one_resolved_pair_never_gives_a_zero_width_interval():
    """Two recipes a whole nat apart at both scales: every draw decides right, and still one pair is one sample."""
    rng = np.random.default_rng(4)
    weights = np.ones(UNITS)
    largest = runs_at(rng, {"a": 3.0, "b": 4.0})
    found = scored(runs_at(rng, {"a": 3.0, "b": 4.0}), largest, weights, resamples=1000)
    assert found["accuracy"] == 1.0 and found["pairs_resolved"] == 1
    low, high = found["interval"]
    assert low < 0.5 and high > 0.99


def test_a_tie_is_counted_apart_and_given_to_neither_recipe():
    rng = np.random.default_rng(5)
    weights = np.ones(UNITS)
    largest = runs_at(rng, {"a": 3.0, "b": 3.3, "c": 3.6})
    small = runs_at(rng, {"a": 3.0, "b": 3.3, "c": 3.6})
    small["b"] = small["a"].copy()  # a and b tie exactly at the smaller scale
    found = scored(small, largest, weights)
    assert found["ties"] == 1 and found["pairs_resolved"] == 3 and found["correct"] == 2 and found["accuracy"] == 1.0
    assert {tuple(p["pair"]): p["decided"] for p in found["pairs"]}["a", "b"] is None


def test_truths_say_how_many_pairs_survive_holm_and_chance_would_resolve():
    rng = np.random.default_rng(6)
    weights = np.ones(UNITS)
    truth = decision_accuracy.truths(runs_at(rng, {"a": 3.0, "b": 3.3, "c": 3.3, "d": 3.3}), weights)
    line = decision_accuracy.chance_line(truth)
    assert line["pairs"] == 6 and abs(line["expected_by_chance"] - 0.3) < 1e-9
    assert truth["a", "b"]["resolved_holm"] and truth["a", "b"]["p_value"] < 0.01
    assert line["resolved_holm"] <= line["resolved"] and line["resolved_holm"] >= 3  # a against each of the others


def synthetic_decision(rng, recipes: int, units: int, seeds: int) -> tuple[dict, dict, np.ndarray, float]:
    """One decision with a known truth: recipes clearly ordered at the large scale (0.2 nats apart, small seed
    noise), close and partly reordered at the small one (differences of 0-0.08 nats, seed noise 0.04 nats, documents
    of varied length and difficulty). Returns the two scales' runs, the token weights, and the true accuracy: the
    expected share of the pairs a small-scale decision orders as the large scale truly does, over documents and seeds."""
    large_means = np.arange(recipes) * 0.2 + 3.0
    small_means = 3.5 + np.arange(recipes) * 0.03 + rng.normal(0, 0.03, recipes)
    tokens = rng.integers(50, 400, units).astype(np.float64)
    per_doc_noise, small_seed_noise, large_seed_noise = 0.3, 0.04, 0.01

    def runs(means, seed_noise):
        difficulty = rng.normal(0, 0.8, units)  # shared by every recipe: the same documents
        return {f"r{i}": (mean + difficulty + rng.normal(0, per_doc_noise, (1, units)) + rng.normal(0, seed_noise, (seeds, 1))
                          + rng.normal(0, 0.02, (seeds, units))) * tokens for i, mean in enumerate(means)}  # fmt: skip

    # the difference of two recipes' means over seeds: documents' recipe-specific noise plus the seeds'
    sd = np.sqrt(2 * per_doc_noise**2 * np.sum(tokens**2) / np.sum(tokens) ** 2 + 2 * (small_seed_noise**2 + 0.02**2 / units) / seeds)
    right = [stats.norm.cdf((small_means[b] - small_means[a]) / sd) for a, b in itertools.combinations(range(recipes), 2)]
    return runs(small_means, small_seed_noise), runs(large_means, large_seed_noise), tokens, float(np.mean(right))


def test_the_95_percent_accuracy_interval_covers_the_true_accuracy_in_at_least_90_percent_of_draws():
    rng = np.random.default_rng(7)
    covered, draws = 0, 200
    for draw in range(draws):
        small, large, weights, true_accuracy = synthetic_decision(rng, recipes=5, units=300, seeds=3)
        found = scored(small, large, weights, resamples=400, seed=draw)
        assert found["pairs_resolved"] == 10  # the large scale orders every pair
        covered += found["interval"][0] <= true_accuracy <= found["interval"][1]
    print(f"the 95% accuracy interval covered the true accuracy in {covered} of {draws} synthetic decisions")
    assert covered / draws >= 0.90, covered / draws


def test_recipe_value_interval_contains_the_mean():
    rng = np.random.default_rng(3)
    sums = runs_at(rng, {"a": 3.0})["a"]
    found = decision_accuracy.recipe_value(sums, np.ones(UNITS))
    assert found["interval"][0] < found["value"] < found["interval"][1] and abs(found["value"] - 3.0) < 0.2
