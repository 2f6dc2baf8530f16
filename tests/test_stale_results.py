"""Nothing silently stale: a stage's identity includes the files it loads, a shard's the input it read. A changed list
or model reruns its stage and what follows, an input rewritten in place reruns its shard, a touched or copied one
does not; --keep-removed on a finished folder redoes what was done without it. Each says so in one line."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.file_digests import input_stamp, input_stamps, path_digest
from curation.recipe import parse_recipe

CURATE = [sys.executable, "-m", "curation"]
RECIPE = """name: stale
source: {kind: parquet}
stages:
  - stage: url_filter
    params: {fineweb_lists: false, domain_lists: [LIST]}
  - stage: dedup_exact
  - stage: pii
"""


def write_shard(path: Path, shard: int, rows: int) -> None:
    ids = [f"s{shard}-{i}" for i in range(rows)]
    urls = [f"https://{'blocked' if i % 5 == 0 else 'fine'}{i % 3}.example/{shard}/{i}" for i in range(rows)]
    texts = [f"Document {i} of shard {shard}: write to person{i}@gmail.com about the rivers." for i in range(rows)]
    pq.write_table(pa.table({"id": ids, "url": urls, "text": texts}), path)


def test_digests_follow_contents_and_stamps_agree(tmp_path, monkeypatch):
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"a": 1}')
    (model / "weights.bin").write_bytes(b"\0" * 1000)
    first = path_digest(str(model))
    assert path_digest(str(model)) == first and path_digest(str(tmp_path / "org/name")) is None
    (model / "weights.bin").write_bytes(b"\1" * 1000)  # retrained: same size
    assert path_digest(str(model)) != first
    files = [tmp_path / f"in-{i}.parquet" for i in range(3)]
    for shard, path in enumerate(files):
        write_shard(path, shard, 10)
    assert input_stamps([str(p) for p in files]) == [input_stamp(str(p)) for p in files]
    before = input_stamp(str(files[0]))
    write_shard(files[0], 0, 8)
    assert input_stamp(str(files[0])) != before and input_stamp(str(tmp_path / "gone.parquet")) is None


def test_a_stage_hash_includes_the_files_it_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    blocked = tmp_path / "blocked.txt"
    blocked.write_text("blocked0.example\n")
    recipe = parse_recipe({"name": "r", "source": {"kind": "parquet"}, "stages": [
        {"stage": "url_filter", "params": {"fineweb_lists": False, "domain_lists": [str(blocked)]}}, {"stage": "dedup_exact"}]},
        "r.yaml")  # fmt: skip
    hashes = recipe.stage_hashes(["in.parquet"], "s")
    blocked.write_text("blocked0.example\nblocked1.example\n")
    changed = recipe.stage_hashes(["in.parquet"], "s")
    assert changed[0] == hashes[0] and changed[1] != hashes[1] and changed[2] != hashes[2]
    assert recipe.stage_loads()[1] == {str(blocked): path_digest(str(blocked))}
    assert recipe.stage_loads()[2] == {}


def curate(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(CURATE + list(args), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def output_ids(run: Path) -> list[str]:
    return sorted(pq.read_table(run / "03_pii").column("id").to_pylist())


@pytest.mark.slow
def test_changed_lists_inputs_and_keep_removed_rerun_what_they_change(tmp_path):
    blocked = tmp_path / "blocked.txt"
    blocked.write_text("blocked0.example\n")
    (tmp_path / "stale.yaml").write_text(RECIPE.replace("LIST", str(blocked)))
    inputs = tmp_path / "in"
    inputs.mkdir()
    for shard in range(3):
        write_shard(inputs / f"in-{shard}.parquet", shard, 20)
    run = tmp_path / "run"
    args = ["run", str(tmp_path / "stale.yaml"), "--input", str(inputs / "in-*.parquet"), "--output", str(run), "--num-cpus", "2"]
    curate(*args)
    first = output_ids(run)
    assert len(first) == 60 - 3 * 2  # rows 0 and 15 of each shard are on blocked0 (5 on blocked2, 10 on blocked1)

    again = curate(*args)
    assert "resumed: 12 stage-shard(s)" in again.stdout and "rerun:" not in again.stdout

    blocked.write_text("blocked0.example\nblocked1.example\n")  # the list changed: its stage and all after it rerun
    listed = curate(*args)
    assert f"rerun: 01_url_filter and the stages after it: {blocked} changed since it ran" in " ".join(listed.stdout.split())
    assert len(output_ids(run)) == 60 - 3 * 3

    write_shard(inputs / "in-0.parquet", 0, 10)  # rewritten in place, 20 -> 10 rows
    rewritten = curate(*args)
    assert "rerun: 1 input(s) changed since they were read" in rewritten.stdout
    assert sum(i.startswith("s0-") for i in output_ids(run)) == 9  # row 0 on blocked0; row 5 on blocked2 stays

    copy = tmp_path / "copy.parquet"
    shutil.copy(inputs / "in-1.parquet", copy)
    shutil.copy(copy, inputs / "in-1.parquet")  # the same bytes at a new time: nothing reruns
    os.utime(inputs / "in-2.parquet")
    touched = curate(*args)
    assert "resumed: 12 stage-shard(s)" in touched.stdout and "rerun:" not in touched.stdout

    kept = curate(*args, "--keep-removed")
    assert "done without --keep-removed, redone to write their removed documents" in " ".join(kept.stdout.split())
    removed = pq.read_table(run / "removed" / "01_url_filter").to_pylist()
    assert removed and all("@gmail.com" not in row["text"] for row in removed)  # redacted by the pii stage after it
    assert all("<EMAIL_ADDRESS>" in row["text"] for row in removed)
