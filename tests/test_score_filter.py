"""The score filter: a lowest score, a shard's top fraction with its ties, documents without a score, its params, and
a shard read in batches that the top fraction still judges whole."""

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.recipe import RecipeError, parse_recipe
from curation.run_folder import RunFolder
from curation.segment import SegmentTask, run_segment
from curation.sources import sample
from filters import STAGES
from filters.score_filter import ScoreFilter


def documents(scores: list) -> pa.Table:
    return pa.table({"id": [f"d{i}" for i in range(len(scores))], "text": ["text"] * len(scores), "score": scores})


def kept_and_dropped(params: dict, table: pa.Table) -> tuple[list[str], dict]:
    result = ScoreFilter(ScoreFilter.Params(**params)).process(table)
    return result.kept["id"].to_pylist(), result.dropped


def test_min_keeps_scores_at_or_above_it_and_drops_documents_without_one():
    table = documents([3.0, 2.5, None, 4, float("nan"), 1.0])
    assert kept_and_dropped({"column": "score", "min": 2.5}, table) == (["d0", "d1", "d3"], {"below_score": 1, "no_score": 2})
    integers = pa.table({"id": ["a", "b"], "text": ["x", "y"], "score": pa.array([2, 3], pa.int8())})
    assert kept_and_dropped({"column": "score", "min": 3}, integers) == (["b"], {"below_score": 1})
    result = ScoreFilter(ScoreFilter.Params(column="score", min=3)).process(integers)
    assert result.kept.column_names == integers.column_names and result.removed["drop_reason"].to_pylist() == ["below_score"]


def test_top_fraction_keeps_the_shards_best_and_every_tie_at_the_cut():
    table = documents([0.1, 0.9, 0.5, 0.7, 0.3, 0.2, 0.8, 0.6, 0.4, 0.0])
    assert kept_and_dropped({"column": "score", "top_fraction": 0.3}, table) == (["d1", "d3", "d6"], {"below_score": 7})
    ties = documents([1, 2, 2, 2, 3])  # the top 40% is 3 and one 2: every 2 ties with it
    assert kept_and_dropped({"column": "score", "top_fraction": 0.4}, ties) == (["d1", "d2", "d3", "d4"], {"below_score": 1})
    assert kept_and_dropped({"column": "score", "top_fraction": 0.1}, documents([5] * 4))[0] == ["d0", "d1", "d2", "d3"]
    # a fraction of the shard's documents: those without a score rank below every score
    assert kept_and_dropped({"column": "score", "top_fraction": 0.5}, documents([None, 1, None, 2])) == (
        ["d1", "d3"], {"no_score": 2})  # fmt: skip
    assert kept_and_dropped({"column": "score", "top_fraction": 1}, documents([None, None])) == ([], {"no_score": 2})
    stage = ScoreFilter(ScoreFilter.Params(column="score", top_fraction=0.3))
    assert stage.process(table).stats == {"score_cut": 0.7} and stage.process(documents([])).kept.num_rows == 0


def test_a_shard_without_the_column_is_counted_and_a_column_of_text_is_refused_in_one_line():
    table = pa.table({"id": ["a", "b"], "text": ["x", "y"]})
    assert kept_and_dropped({"column": "score", "min": 0}, table) == ([], {"no_score": 2})
    with pytest.raises(ValueError, match=r"^score_filter: column `score` is string, not a number: set params.column"):
        kept_and_dropped({"column": "score", "min": 0}, table.append_column("score", pa.array(["1", "2"])))


@pytest.mark.parametrize("params, message", [
    ({"column": "score"}, "give exactly one of min or top_fraction"),
    ({"column": "score", "min": 1, "top_fraction": 0.5}, "give exactly one of min or top_fraction"),
    ({"min": 1}, r"stages\[0\].params.column: Field required"),
    ({"column": "score", "top_fraction": 0}, r"stages\[0\].params.top_fraction: Input should be greater than 0"),
])  # fmt: skip
def test_params_are_checked_when_the_recipe_loads(params, message):
    with pytest.raises(RecipeError, match=message):
        parse_recipe({"name": "x", "stages": [{"stage": "score_filter", "params": params}]}, "x.yaml")
    assert STAGES["score_filter"] is ScoreFilter


def run_shard(tmp_path, source: dict, params: dict, path: str, name: str) -> tuple[RunFolder, list[dict]]:
    recipe = parse_recipe({"name": name, "source": source, "stages": [{"stage": "score_filter", "params": params}]}, name)
    folder = RunFolder(str(tmp_path / name), recipe.stage_dirs())
    task = SegmentTask(recipe, 0, 1, 0, path, folder, frozenset({0, 1}), True, "s", recipe.stage_hashes([path], "s"))
    return folder, run_segment(task)


def test_a_parquet_inputs_score_column_reaches_the_stage(tmp_path):
    """The parquet source keeps a file's extra columns, so FineWeb-Edu-style documents are filtered by their score."""
    path = str(tmp_path / "docs.parquet")
    pq.write_table(pa.table({"text": [f"document {i}" for i in range(6)], "score": [0.5, 3.1, 2.9, None, 4.0, 3.0]}), path)
    folder, stats = run_shard(tmp_path, {"kind": "parquet"}, {"column": "score", "min": 3}, path, "edu")
    assert pq.read_table(folder.part(1, 0))["score"].to_pylist() == [3.1, 4.0, 3.0]
    assert stats[1]["dropped"] == {"below_score": 2, "no_score": 1}


def test_a_top_fraction_judges_the_whole_shard_when_it_is_read_in_batches(tmp_path):
    """Read 7 pages at a time, the top half of a WARC file by `warc_offset` is still the file's top half (per_document
    is False), while a lowest score judges each batch as it comes (per_document stays True)."""
    warc = str(sample.generate(tmp_path / "in", pages=40, files=1, seed=3)[0])
    halves = {}
    for batch in (7, 1000):
        folder, stats = run_shard(tmp_path, {"batch_documents": batch}, {"column": "warc_offset", "top_fraction": 0.5},
                                  warc, f"top-{batch}")  # fmt: skip
        halves[batch] = pq.read_table(folder.part(1, 0))["id"].to_pylist()
        assert stats[1]["docs_out"] == math.ceil(stats[0]["docs_out"] / 2) and stats[1]["score_cut"] > 0
    assert halves[7] == halves[1000]
    assert not ScoreFilter(ScoreFilter.Params(column="score", top_fraction=0.5)).per_document
    assert ScoreFilter(ScoreFilter.Params(column="score", min=1)).per_document
