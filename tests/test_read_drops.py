"""Which input file the read stage dropped: the first few per reason in its shard's stats and, merged over shards, in
stats.json; every one (path, drop_reason, bytes) in removed/00_read/ with --keep-removed. Run on the read segment
itself (no Ray); tests/test_text_corpus.py runs it through `curate run`."""

import json
import os

import pyarrow.parquet as pq

from curation import stats
from curation.recipe import parse_recipe
from curation.run_folder import RunFolder
from curation.segment import SegmentTask, run_segment

PROSE = "A paragraph of a book, long enough to be a document of its own.\n"


def read_shard(output, path, shard: int, keep_removed: bool) -> dict:
    recipe = parse_recipe({"name": "t", "source": {"kind": "text"}, "stages": [{"stage": "quality_buckets"}]}, "t")
    folder = RunFolder(str(output), recipe.stage_dirs())
    hashes = recipe.stage_hashes([str(path)], "s")
    return run_segment(SegmentTask(recipe, 0, 0, shard, str(path), folder, frozenset({0}), keep_removed, "s", hashes))[0]


def corpus(tmp_path):
    """Two inputs: `books` with 7 binary files, a bad JSON line and a link to itself; `papers` with an undecodable one."""
    books, papers = tmp_path / "books", tmp_path / "papers"
    books.mkdir()
    papers.mkdir()
    (books / "good.txt").write_text(PROSE)
    for number in range(7):
        (books / f"blob{number}.txt").write_bytes(b"\x00" * (number + 1))
    (books / "records.jsonl").write_text(json.dumps({"text": PROSE}) + "\n{oops\n")
    os.symlink("loop.txt", books / "loop.txt")  # a link loop
    (papers / "good.md").write_text(PROSE)
    (papers / "noise.md").write_bytes(bytes(range(1, 256)) * 4)
    return books, papers


def test_dropped_files_are_named_in_stats_and_listed_with_keep_removed(tmp_path):
    books, papers = corpus(tmp_path)
    first = read_shard(tmp_path / "run", books, 0, keep_removed=True)
    assert first["dropped"] == {"binary_file": 7, "bad_json": 1, "not_a_file": 1} and first["docs_out"] == 2
    binary = [{"path": str(books / f"blob{n}.txt"), "reason": "binary_file", "bytes": n + 1} for n in range(5)]
    assert first["drop_samples"] == binary + [  # the first 5 of each reason, in the order they were read
        {"path": str(books / "loop.txt"), "reason": "not_a_file", "bytes": 0},
        {"path": f"{books / 'records.jsonl'}#1", "reason": "bad_json", "bytes": 5},
    ]  # fmt: skip
    listed = pq.read_table(tmp_path / "run" / "removed" / "00_read" / "part-00000.parquet").to_pylist()
    assert len(listed) == 9 and listed[6] == {"path": str(books / "blob6.txt"), "drop_reason": "binary_file", "bytes": 7}

    second = read_shard(tmp_path / "run", papers, 1, keep_removed=True)
    assert second["drop_samples"] == [{"path": str(papers / "noise.md"), "reason": "undecodable", "bytes": 1020}]
    manifest = {"recipe": {"name": "t"}, "stages": {"00_read": {"shards": {"0": first, "1": second}}}}
    stats.write(RunFolder(str(tmp_path / "run"), ["00_read"]).fs, str(tmp_path / "run"), manifest, ["00_read"])
    [stage] = json.loads((tmp_path / "run" / "stats.json").read_text())["stages"]
    assert stage["drop_samples"] == first["drop_samples"] + second["drop_samples"]  # over shards, 5 per reason at most
    totals = stats.stage_totals(str(tmp_path / "run"))["00_read"]  # the samples are no funnel column
    assert totals["dropped_binary_file"] == 7 and not [column for column in totals if "drop_samples" in column]


def test_without_keep_removed_only_the_samples(tmp_path):
    books, _ = corpus(tmp_path)
    read = read_shard(tmp_path / "run", books, 0, keep_removed=False)
    assert len(read["drop_samples"]) == 7 and not (tmp_path / "run" / "removed").exists()
