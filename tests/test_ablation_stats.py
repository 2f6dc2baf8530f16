"""experiments/ablation_stats.py: paired intervals over seeds and documents, and accuracy against chance."""

import numpy as np
import pytest

from experiments.ablation_stats import at_chance, paired_interval


def runs(rng, doc_effect, tokens, seeds=3, seed_sd=0.05, doc_sd=0.3, shift=0.0):
    """Summed losses (seeds, documents) of a model family: a per-document difficulty shared by every run, a per-seed
    offset (a whole run lands higher or lower), per-document noise that shrinks with the document's length."""
    return np.array([(doc_effect + shift + rng.normal(0, seed_sd) + rng.normal(0, doc_sd, len(tokens)) / np.sqrt(tokens / 100))
                     * tokens for _ in range(seeds)])  # fmt: skip


def draw(rng, docs=300):
    return rng.normal(3.0, 0.5, docs), rng.integers(50, 600, docs).astype(float)


def resampled_seeds_resolve(variant, base, tokens, rng, resamples=1000) -> bool:
    """The naive two-level bootstrap (seeds, then documents, both with replacement): the comparator below."""
    differences, (seeds, docs) = variant - base, variant.shape
    seed_counts = rng.multinomial(seeds, np.full(seeds, 1 / seeds), size=resamples)
    doc_counts = rng.multinomial(docs, np.full(docs, 1 / docs), size=resamples)
    draws = np.einsum("rs,sn,rn->r", seed_counts, differences, doc_counts) / (seeds * (doc_counts @ tokens))
    low, high = np.percentile(draws, [2.5, 97.5])
    return low > 0 or high < 0


def test_a_variant_identical_to_the_base_is_never_called_different():
    """Identical per-document losses, or identical up to noise far below a nat's thousandth: 20 seeded repeats, no
    call, and the difference is what was added."""
    for repeat in range(20):
        rng = np.random.default_rng(repeat)
        doc_effect, tokens = draw(rng)
        base = runs(rng, doc_effect, tokens)
        same = paired_interval(base.copy(), base, tokens, seed=repeat)
        assert (same.difference, same.low, same.high, same.resolved) == (0.0, 0.0, 0.0, False)
        nearly = paired_interval(base + rng.normal(0, 1e-6, base.shape), base, tokens, seed=repeat)
        assert not nearly.resolved and abs(nearly.difference) < 1e-7


def test_variants_drawn_like_the_base_are_rarely_called_and_resampling_three_seeds_would_call_a_quarter():
    """Variant and base drawn from one distribution, seed noise included: over 200 repeats the interval calls about
    5% at most; resampling the 3 seeds instead (the naive bootstrap) calls about 25%:
    its interval ends at the smallest and largest seed, which all share a sign 1 time in 4."""
    ours = naive = 0
    for repeat in range(200):
        rng = np.random.default_rng(1000 + repeat)
        doc_effect, tokens = draw(rng)
        variant, base = runs(rng, doc_effect, tokens), runs(rng, doc_effect, tokens)
        called = paired_interval(variant, base, tokens, seed=repeat, resamples=1000).resolved
        ours += called
        naive += resampled_seeds_resolve(variant, base, tokens, rng)
    assert ours / 200 <= 0.06 and naive / 200 >= 0.15, (ours, naive)


def test_a_real_shift_is_called_with_its_size():
    rng = np.random.default_rng(7)
    doc_effect, tokens = draw(rng)
    base, worse = runs(rng, doc_effect, tokens), runs(rng, doc_effect, tokens, shift=0.2)
    interval = paired_interval(worse, base, tokens)
    assert interval.resolved and interval.low > 0 and interval.low < 0.2 < interval.high
    assert interval.difference == pytest.approx(np.mean(interval.per_seed)) and len(interval.per_seed) == 3
    better = paired_interval(base, worse, tokens)
    assert better.resolved and better.high < 0
    assert interval.to_json()["resolved"] is True


def test_pairs_must_match_and_one_seed_is_refused():
    tokens = np.ones(4)
    with pytest.raises(ValueError, match="do not pair"):
        paired_interval(np.zeros((3, 4)), np.zeros((3, 5)), tokens)
    with pytest.raises(ValueError, match="1 seed"):
        paired_interval(np.zeros((1, 4)), np.zeros((1, 4)), tokens)


def test_a_model_at_chance_is_flagged_even_when_its_seeds_agree():
    """Two seeds at 0.26 on 100 four-choice items agree, and are still at chance; 0.40 is above it."""
    assert at_chance(26, 100, 0.25) and at_chance(20, 100, 0.25)
    assert not at_chance(40, 100, 0.25)
    assert at_chance(0, 0, 0.25)
    rng = np.random.default_rng(3)
    guessing = (rng.random((2, 100)) < 0.25).astype(float)
    agreeing = np.array([guessing[0], guessing[0]])  # two seeds that agree exactly: no seed noise at all
    assert at_chance(int(agreeing.mean() * 100), 100, 0.25)


def test_documents_to_resolve_scales_the_interval_as_one_over_root_documents():
    from experiments.ablation_stats import Interval, documents_to_resolve

    unresolved = Interval(difference=0.1, low=-0.1, high=0.3, per_seed=[0.1, 0.1])  # half-width 0.2: twice the difference
    assert documents_to_resolve(unresolved, 100) == 400
    assert documents_to_resolve(Interval(0.1, 0.05, 0.15, [0.1, 0.1]), 100) is None  # resolved already
