"""Tokens to match from data-scaling laws: the fit recovers a known law, inverts it, and its interval holds the truth."""

import json
import math

import numpy as np

from experiments.data_scaling import between_points, compare, describe, fit, fraction_to_reach, identification

FRACTIONS = np.array([0.25, 0.5, 1.0, 2.0])


def law_losses(E, B, beta, fractions=FRACTIONS):
    return E + B / np.asarray(fractions) ** beta


def test_the_fit_recovers_a_known_law_and_inverts_it():
    E, B, beta = fit(FRACTIONS, law_losses(3.0, 0.8, 0.45))
    assert math.isclose(E, 3.0, abs_tol=0.02) and math.isclose(B, 0.8, rel_tol=0.03) and math.isclose(beta, 0.45, rel_tol=0.02)
    assert math.isclose(fraction_to_reach([3.0, 0.8, 0.45], law_losses(3.0, 0.8, 0.45, [1.7])[0]), 1.7, rel_tol=1e-9)
    assert fraction_to_reach([3.0, 0.8, 0.45], 2.9) == math.inf  # below E: no amount of this data reaches it
    assert np.isnan(fit(FRACTIONS, law_losses(3.0, -0.8, 0.45))).all()  # loss rising with tokens: no law
    rows = fit(FRACTIONS, np.stack([law_losses(3.0, 0.8, 0.45), law_losses(2.0, 1.5, 0.3)]))
    assert np.allclose(rows[:, 0], [3.0, 2.0], atol=0.02)


def test_tokens_of_raw_to_match_the_base_with_an_interval_that_holds_the_truth():
    """Raw data worth half as much per token (B doubled): it needs 2^(1/beta) times the base's tokens."""
    rng = np.random.default_rng(1)
    documents, budget = 300, 100_000
    tokens = rng.integers(50, 400, documents).astype(float)
    per_document = rng.normal(0, 0.3, documents)  # documents differ in difficulty, alike for every run

    def runs(E, B, beta, fraction, seeds):
        loss = law_losses(E, B, beta, [fraction])[0] + per_document
        return np.stack([(loss + rng.normal(0, 0.05, documents)) * tokens for _ in range(seeds)])

    base = [{"tokens": int(f * budget), "runs": [], "sums": runs(3.0, 0.5, 0.5, f, 3 if f == 1 else 1)} for f in (0.25, 0.5, 1.0)]
    raw = [{"tokens": int(f * budget), "runs": [], "sums": runs(3.0, 1.0, 0.5, f, 3 if f == 1 else 1)} for f in (0.25, 0.5, 1.0, 2.0, 3.0, 6.0)]
    result = compare({"base": base, "raw": raw}, tokens, budget, "base", samples=500)
    assert json.loads(json.dumps(result)) == result  # results.json holds it
    match = result["variants"]["raw"]["tokens_to_match_base"]
    low, high = match["multiple_interval"]
    assert low <= 4.0 <= high and high / low < 2.5 and match["trained_multiples"] == [0.25, 6.0]
    assert math.isclose(match["tokens"], match["multiple"] * budget)
    law_low, law_high = match["law_multiple_interval"]
    assert law_low <= 4.0 <= law_high and law_high / law_low < 2 and match["law_identified"]
    reverse = result["variants"]["raw"]["base_tokens_to_match"]
    assert reverse["law_multiple_interval"][0] <= 0.25 <= reverse["law_multiple_interval"][1]
    assert [p["tokens"] for p in result["variants"]["raw"]["points"]] == [25_000, 50_000, 100_000, 200_000, 300_000, 600_000]

    short = compare({"base": base, "raw": raw[:3]}, tokens, budget, "base", samples=200)["variants"]["raw"]
    assert short["tokens_to_match_base"]["multiple"] == math.inf  # raw trained to 1x stays above the base at 1x
    assert "more than 1x" in describe("tokens_to_match_base", short["tokens_to_match_base"])
    assert short["tokens_to_match_base"]["multiple_interval"] == [math.inf, math.inf]
    smaller = match["at_smaller_budgets"]  # the base's loss at 0.25x and 0.5x: raw reaches it at 4 times those
    assert [point["tokens"] for point in smaller] == [25_000, 50_000]
    for point in smaller:
        assert point["multiple_interval"][0] <= 4.0 <= point["multiple_interval"][1]


def test_a_law_at_its_exponents_bound_is_not_identified_by_the_same_check_as_the_ladders():
    """Loss falling linearly in log tokens has no floor a power law can fit: beta goes to its bound (docs/benchmarks.md)."""
    losses = 4.0 - 0.2 * np.log(FRACTIONS)
    rng = np.random.default_rng(0)
    laws = fit(FRACTIONS, np.vstack([losses, losses + rng.normal(0, 0.01, (50, len(FRACTIONS)))]))
    checked = identification(laws, FRACTIONS, losses, 100_000)
    assert not checked["identified"] and any(reason.startswith("beta 0.01 at or past an end") for reason in checked["reasons"])
    pinned = np.vstack([law_losses(3.0, 0.8, 0.45)] * 2)
    assert identification(fit(FRACTIONS, pinned), FRACTIONS, pinned[0], 100_000) == {"identified": True, "reasons": []}


def test_between_points_crosses_in_log_tokens():
    found = between_points([1.0, 4.0], np.array([[5.0, 3.0], [5.0, 3.0], [5.0, 3.0]]), np.array([4.0, 2.0, 6.0]))
    assert np.allclose(found, [2.0, math.inf, 0.0])
