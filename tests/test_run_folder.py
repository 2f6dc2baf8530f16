"""A run folder as a user reuses it, through the real `curate` CLI on a local Ray: a changed recipe rerun into the same
folder leaves exactly its own stages (tokenize reads its final stage, never a leftover), each duplicate stage keeps
its own cluster columns, a full disk is one line and the rerun resumes, an unwritable output is refused before Ray
starts."""

import glob
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation import stats
from curation.sources.near_duplicates import near_duplicate_pairs
from tests.conftest import ROOT

pytestmark = pytest.mark.slow
CURATE = [sys.executable, "-m", "curation"]
EXACT_THEN_NEAR = "name: a\nsource: {kind: parquet}\nstages:\n  - stage: dedup_exact\n  - stage: minhash\n    params: {verify: true}\n"
EXACT_ONLY = "name: b\nsource: {kind: parquet}\nstages:\n  - stage: dedup_exact\n"


def curate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(CURATE + list(args), capture_output=True, text=True, timeout=600)


def ids(folder: Path) -> list[str]:
    return sorted(i for part in sorted(folder.glob("part-*.parquet")) for i in pq.read_table(part, columns=["id"])["id"].to_pylist())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """200 near-duplicate pairs and 30 verbatim copies of originals, in 3 Parquet shards, and the two recipes."""
    folder = tmp_path_factory.mktemp("corpus")
    pairs = near_duplicate_pairs(200, 0.85, 1.0, seed=4)
    docs = [(f"p{i}{side}", text) for i, pair in enumerate(pairs) for side, text in (("a", pair.original), ("b", pair.copy))]
    docs += [(f"p{i}c", pairs[i].original) for i in range(30)]
    for shard in range(3):
        part = docs[shard::3]
        pq.write_table(pa.table({"id": [d for d, _ in part], "text": [t for _, t in part]}), folder / f"in-{shard}.parquet")
    (folder / "a.yaml").write_text(EXACT_THEN_NEAR)
    (folder / "b.yaml").write_text(EXACT_ONLY)
    return folder


def run(corpus: Path, recipe: str, output: Path) -> subprocess.CompletedProcess:
    return curate("run", str(corpus / recipe), "--input", str(corpus / "in-*.parquet"), "--output", str(output), "--num-cpus", "2")


def test_a_changed_recipe_leaves_only_its_stages_and_tokenize_reads_its_final_one(corpus, tmp_path):
    output = tmp_path / "run"
    first = run(corpus, "a.yaml", output)
    assert first.returncode == 0, first.stdout + first.stderr
    a_final = ids(output / "02_minhash")
    exact = pq.read_table(output / "02_minhash").to_pandas()
    # the exact stage's clusters survive the near-duplicate stage: an original with a verbatim copy (p0..p29) still
    # says its cluster of 2, wherever the near stage kept it
    copied = exact.id.str.match(r"p([0-9]|[12][0-9])[ac]$")
    assert copied.sum() >= 15 and (exact[copied].exact_cluster_size == 2).all() and exact[copied].exact_cluster.notna().all()
    assert (exact[~copied].exact_cluster_size == 1).all() and exact[~copied].exact_cluster.isna().all()
    assert (exact.near_cluster_size > 1).sum() > 150 and not (output / "work").exists()

    second = run(corpus, "b.yaml", output)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "removed stage folders the current recipe does not have: 02_minhash" in second.stdout
    assert not (output / "02_minhash").exists() and set(json.loads((output / "manifest.json").read_text())["stages"]) == {"00_read", "01_dedup_exact"}
    assert set(stats.load(str(output)).stage) == {"00_read", "01_dedup_exact"}
    b_final = ids(output / "01_dedup_exact")
    assert len(b_final) == 400 and len(a_final) < 300  # B keeps the near-duplicates A removed

    tokenized = curate("tokenize", str(output), "--vocab-size", "512")
    assert tokenized.returncode == 0, tokenized.stdout + tokenized.stderr
    assert ids(output / "tokens") == b_final
    # the training guide's way to read the token parts (tokenizer.json and stats.json lie beside them)
    [documented] = [line for line in (ROOT / "docs" / "training.md").read_text().splitlines() if 'pd.read_parquet(sorted(glob.glob("RUN/tokens' in line]
    expression = re.search(r"`(pd\.read_parquet\(.*?\))`", documented).group(1).replace("RUN", str(output))
    assert sorted(eval(expression, {"pd": pd, "glob": glob}).id) == b_final


@pytest.fixture
def small_disk(tmp_path):
    """A real 1.5 MiB filesystem (tmpfs, needs root), grown afterwards to let the rerun finish."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1536k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_is_one_line_and_the_rerun_resumes_without_loss(corpus, small_disk, tmp_path):
    big = [(f"b{shard}-{i}", f"{shard} {i} " + " ".join(f"w{(i * 7919 + k * 104729) % 100003}" for k in range(400)))
           for shard in range(3) for i in range(250)]  # fmt: skip
    for shard in range(3):
        rows = big[shard * 250 : (shard + 1) * 250]
        pq.write_table(pa.table({"id": [d for d, _ in rows], "text": [t for _, t in rows]}), tmp_path / f"big-{shard}.parquet")
    args = ["run", str(corpus / "b.yaml"), "--input", str(tmp_path / "big-*.parquet"), "--num-cpus", "2"]
    full = curate(*args, "--output", str(small_disk / "run"))
    assert full.returncode == 1
    assert "Traceback" not in full.stdout + full.stderr
    assert "disk full writing" in full.stdout + full.stderr and "MiB free" in full.stdout + full.stderr
    assert not list(small_disk.rglob("*.tmp-*")), "a failed write left its temporary"
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    rerun = curate(*args, "--output", str(small_disk / "run"))
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert ids(small_disk / "run" / "01_dedup_exact") == sorted(d for d, _ in big)


def test_an_unwritable_output_is_refused_before_ray_starts(corpus, tmp_path):
    read_only = tmp_path / "ro"
    read_only.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(read_only)], capture_output=True).returncode:
        pytest.skip("mounting a read-only tmpfs needs root")
    try:
        done = run(corpus, "b.yaml", read_only / "run")
    finally:
        subprocess.run(["umount", "-l", str(read_only)], capture_output=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"curate: --output '{read_only / 'run'}' is not writable: Read-only file system"
    assert "recipe b on" not in done.stdout  # refused before the run (and its Ray) started


def test_an_empty_or_renamed_input_fails_the_command_by_name(tmp_path):
    from curation.sources import sample

    good = sample.generate(tmp_path / "in", pages=20, files=1, seed=1)[0]
    (tmp_path / "in" / "empty.warc.gz").write_bytes(b"")
    (tmp_path / "in" / "notes.warc.gz").write_text("my notes\n" * 100)
    recipe = tmp_path / "read.yaml"
    recipe.write_text("name: read\nstages:\n  - stage: extract\n")
    done = curate("run", str(recipe), "--input", str(tmp_path / "in" / "*.warc.gz"), "--output", str(tmp_path / "run"), "--num-cpus", "2")
    assert done.returncode == 1, done.stdout
    for name in ("empty.warc.gz", "notes.warc.gz"):
        assert f"{name}): ValueError('no warc record in it" in done.stdout
    assert "2 shard(s) failed" in done.stdout and str(good) not in done.stdout.split("failed")[-1]
