"""The score ensemble: per-shard percentiles cut into buckets and combined by max (Nemotron-CC's rule) or mean, a
document without every score left unscored, and the combined column kept by score_filter and bucketed by
quality_buckets in one recipe."""

import pyarrow as pa
import pytest

from curation.recipe import RecipeError, parse_recipe
from filters.quality_buckets import QualityBuckets
from filters.score_ensemble import ScoreEnsemble
from filters.score_filter import ScoreFilter


def scored() -> pa.Table:
    return pa.table({"id": list("abcde"), "text": ["t"] * 5, "edu": [0.1, 0.9, 0.5, 0.3, None],
                     "hq": [40.0, 10.0, 20.0, 50.0, 30.0]})  # fmt: skip


def combined(**params) -> list:
    result = ScoreEnsemble(ScoreEnsemble.Params(columns=["edu", "hq"], **params)).process(scored())
    assert result.kept.num_rows == 5 and {"edu", "hq"} <= set(result.kept.column_names)
    return result.kept["ensemble_score"].to_pylist()


def test_the_max_of_per_shard_buckets_as_nemotron_cc_and_the_mean_of_raw_scores():
    # edu ranks among the 4 scored: a 0.25, b 1.0, c 0.75, d 0.5; hq among 5: a 0.8, b 0.2, c 0.4, d 1.0, e 0.6
    assert combined(buckets=20) == [16, 19, 15, 19, None]
    assert combined(scale="shard_rank") == pytest.approx([0.8, 1.0, 0.75, 1.0, None])
    assert combined(scale="raw", combine="mean") == pytest.approx([20.05, 5.45, 10.25, 25.15, None])


def test_the_combined_column_is_kept_by_score_filter_and_bucketed():
    table = ScoreEnsemble(ScoreEnsemble.Params(columns=["edu", "hq"], buckets=20)).process(scored()).kept
    kept = ScoreFilter(ScoreFilter.Params(column="ensemble_score", min=19)).process(table)
    assert kept.kept["id"].to_pylist() == ["b", "d"] and kept.dropped == {"below_score": 2, "no_score": 1}
    buckets = QualityBuckets(QualityBuckets.Params(column="ensemble_score", buckets={"top": 19, "mid": 15})).process(table)
    assert buckets.kept["bucket"].to_pylist() == ["mid", "top", "mid", "top", "lq"]


def test_params_and_columns_are_checked():
    with pytest.raises(RecipeError, match=r"buckets cut a 0-1 scale: set scale: shard_rank"):
        parse_recipe({"name": "e", "stages": [{"stage": "score_ensemble", "params": {"columns": ["a", "b"], "scale": "raw", "buckets": 5}}]}, "e")
    with pytest.raises(RecipeError, match=r"columns: List should have at least 2 items"):
        parse_recipe({"name": "e", "stages": [{"stage": "score_ensemble", "params": {"columns": ["a"]}}]}, "e")
    with pytest.raises(ValueError, match="column `text` is string, not a number"):
        ScoreEnsemble(ScoreEnsemble.Params(columns=["edu", "text"])).process(scored())
    assert not ScoreEnsemble(ScoreEnsemble.Params(columns=["a", "b"])).per_document
    assert ScoreEnsemble(ScoreEnsemble.Params(columns=["a", "b"], scale="raw")).per_document
