"""Decision accuracy on synthetic runs whose truth is known (experiments/decision_accuracy.py)."""

import numpy as np

from experiments import decision_accuracy

UNITS, SEEDS = 200, 3


def runs_at(rng, means: dict[str, float], seed_noise: float = 0.02, unit_noise: float = 0.5, units: int = UNITS) -> dict[str, np.ndarray]:
    """Per recipe (seeds, units) sums of a per-token loss: every unit has its own difficulty (shared by recipes, as
    the same documents are scored), each seed shifts a whole run, each recipe adds its mean."""
    difficulty = rng.normal(0, unit_noise, units)
    return {recipe: (mean + difficulty + rng.normal(0, seed_noise, (SEEDS, 1)) + rng.normal(0, 0.05, (SEEDS, units)))
            for recipe, mean in means.items()}  # fmt: skip


def test_a_recipe_better_at_every_scale_is_always_ranked_first():
    rng = np.random.default_rng(0)
    weights = np.ones(UNITS)
    for trial in range(20):
        scales = [runs_at(rng, {"good": 3.0 - 0.1 * s, "plain": 3.2 - 0.1 * s, "other": 3.3 - 0.1 * s}) for s in range(3)]
        truth = decision_accuracy.truths(scales[-1], weights)
        assert truth["good", "other"]["better"] == "good" and truth["good", "plain"]["better"] == "good"
        for runs in scales:
            assert decision_accuracy.ranking(runs, weights)[0] == "good"
            found = decision_accuracy.accuracy(runs, weights, truth, resamples=200, seed=trial)
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
            found = decision_accuracy.accuracy(runs_at(rng, {"a": 3.0, "b": 3.0}, units=units), weights, {("a", "b"): verdict})
            assert found["accuracy"] is None and found["pairs_unresolved"] == 1 and found["pairs_resolved"] == 0
    assert called / trials <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / trials)


def test_a_smaller_scale_that_flips_the_order_is_scored_wrong_with_an_interval():
    rng = np.random.default_rng(2)
    weights = np.ones(UNITS)
    largest = runs_at(rng, {"a": 3.0, "b": 3.2, "c": 3.4})
    truth = decision_accuracy.truths(largest, weights)
    flipped = runs_at(rng, {"a": 3.4, "b": 3.2, "c": 3.0})  # every pair in the wrong order
    found = decision_accuracy.accuracy(flipped, weights, truth, resamples=300)
    assert found["pairs_resolved"] == 3 and found["accuracy"] == 0.0
    assert found["interval"] == [0.0, 0.0]
    noisy = runs_at(rng, {"a": 3.0, "b": 3.005, "c": 3.4}, seed_noise=0.05)  # a and b too close to order reliably
    interval = decision_accuracy.accuracy(noisy, weights, truth, resamples=500)["interval"]
    assert interval[0] < interval[1] and interval[0] <= 2 / 3


def test_recipe_value_interval_contains_the_mean():
    rng = np.random.default_rng(3)
    sums = runs_at(rng, {"a": 3.0})["a"]
    found = decision_accuracy.recipe_value(sums, np.ones(UNITS))
    assert found["interval"][0] < found["value"] < found["interval"][1] and abs(found["value"] - 3.0) < 0.2
