"""A fused task without Ray: reading a WARC file in batches gives the same parts, removed documents and stats as
reading it whole, including for a stage that needs the whole shard."""

import pyarrow.parquet as pq

from curation.recipe import parse_recipe
from curation.run_folder import RunFolder
from curation.segment import SegmentTask, run_segment
from curation.sources import sample

STAGES = [
    {"stage": "extract"},
    {"stage": "langid", "params": {"languages": ["en"], "min_score": 0.65}},
    {"stage": "heuristics"},
    {"stage": "code_filters"},  # per_document = False: gets the batches' output joined
]


def run(tmp_path, warc, batch: int, name: str) -> tuple[RunFolder, list[dict]]:
    recipe = parse_recipe({"name": name, "source": {"batch_documents": batch}, "stages": STAGES}, name)
    folder = RunFolder(str(tmp_path / name), recipe.stage_dirs())
    every_stage = frozenset(range(len(STAGES) + 1))
    task = SegmentTask(recipe, 0, len(STAGES), 0, str(warc), folder, every_stage, True, "s", recipe.stage_hashes([str(warc)], "s"))
    return folder, run_segment(task)


def test_batches_give_what_the_whole_file_gives(tmp_path):
    warc = sample.generate(tmp_path / "in", pages=150, files=1, seed=5)[0]
    whole, whole_stats = run(tmp_path, warc, 100_000, "whole")
    batched, batched_stats = run(tmp_path, warc, 7, "batched")

    def without_seconds(stats):
        return [{key: value for key, value in stage.items() if key not in ("seconds", "part_sha256")} for stage in stats]

    assert without_seconds(batched_stats) == without_seconds(whole_stats)
    assert whole_stats[0]["docs_out"] > 100 and any(stage["dropped"] for stage in whole_stats[1:])
    for index in range(len(STAGES) + 1):
        kept = pq.read_table(batched.part(index, 0))
        assert kept.num_rows == batched_stats[index]["docs_out"]
        assert kept.equals(pq.read_table(whole.part(index, 0)))
        if index and batched_stats[index]["dropped"]:
            assert pq.read_table(batched.removed(index, 0)).equals(pq.read_table(whole.removed(index, 0)))
    assert pq.ParquetFile(batched.part(1, 0)).num_row_groups > 1  # it was written a batch at a time
