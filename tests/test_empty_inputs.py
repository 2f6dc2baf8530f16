"""An input that yields no record at all (empty, or not of the recipe's source kind) is a failed shard naming the
file, for every source kind: never an exit 0 with 0 documents. A file whose records are all dropped is not."""

import errno
import gzip
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.recipe import parse_recipe
from curation.run_folder import RunFolder
from curation.segment import SegmentTask, StageFailed, rerun_may_fix, run_segment
from curation.sources import sample


def read_shard(tmp_path, kind: str, path) -> list[dict]:
    recipe = parse_recipe({"name": "t", "source": {"kind": kind}, "stages": [{"stage": "quality_buckets"}]}, "t")
    folder = RunFolder(str(tmp_path / "out"), recipe.stage_dirs())
    hashes = recipe.stage_hashes([str(path)], "s")
    return run_segment(SegmentTask(recipe, 0, 0, 0, str(path), folder, frozenset({0}), False, "s", hashes))


def empty_inputs(tmp_path) -> list[tuple[str, object]]:
    (tmp_path / "empty.warc.gz").write_bytes(b"")
    (tmp_path / "notes.warc.gz").write_text("these are my notes, renamed by mistake\n" * 50)
    (tmp_path / "notes.warc").write_text("these are my notes, renamed by mistake\n" * 50)
    (tmp_path / "text.warc.gz").write_bytes(gzip.compress(b"plain text in a gzip, no WARC header\n" * 50))
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "empty.parquet")
    (tmp_path / "no-text-files").mkdir()
    (tmp_path / "empty-repo").mkdir()
    return [("warc", tmp_path / "empty.warc.gz"), ("warc", tmp_path / "notes.warc.gz"), ("warc", tmp_path / "notes.warc"),
            ("warc", tmp_path / "text.warc.gz"), ("parquet", tmp_path / "empty.parquet"),
            ("text", tmp_path / "no-text-files"), ("code", tmp_path / "empty-repo")]  # fmt: skip


def test_an_input_with_no_record_fails_its_shard_by_name(tmp_path):
    for kind, path in empty_inputs(tmp_path):
        with pytest.raises(StageFailed, match=rf"failed on {path}: .*no {kind} record in it"):
            read_shard(tmp_path, kind, path)


def test_only_a_failure_of_the_machine_is_one_a_rerun_may_fix(tmp_path):
    """A file that is no WARC fails again on every rerun, so `curate run` says to fix it; a lost worker or a full disk
    need not come back, and the flag crosses Ray (pickled) with the failure."""
    import ray.exceptions

    with pytest.raises(StageFailed) as no_warc:
        read_shard(tmp_path, "warc", empty_inputs(tmp_path)[1][1])
    assert not pickle.loads(pickle.dumps(no_warc.value)).rerun_fixes
    assert pickle.loads(pickle.dumps(StageFailed("00_read", "failed", "disk full", True))).rerun_fixes
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as full:
            raise RuntimeError("writing the part") from full
    except RuntimeError as chained:
        assert rerun_may_fix(chained)
    assert rerun_may_fix(ray.exceptions.WorkerCrashedError()) and rerun_may_fix(ConnectionResetError())
    assert not rerun_may_fix(ValueError("stage 'langid' needs columns ['text']")) and not rerun_may_fix(FileNotFoundError())


def test_records_all_dropped_is_not_a_failure(tmp_path):
    """A WARC file of request records only: records were read, each dropped with its reason."""
    warc = sample.generate(tmp_path / "in", pages=20, files=1, seed=2)[0]
    members = gzip.decompress(warc.read_bytes()).split(b"WARC/1.0\r\n")
    requests = [b"WARC/1.0\r\n" + m for m in members if b"WARC-Type: request" in m or b"WARC-Type: warcinfo" in m]
    (tmp_path / "requests.warc").write_bytes(b"".join(requests))
    [read] = read_shard(tmp_path, "warc", tmp_path / "requests.warc")
    assert read["docs_out"] == 0 and read["docs_in"] == len(requests) > 0 and set(read["dropped"]) <= {"record_request", "record_warcinfo"}
