"""Dedup on a real local Ray cluster: precision and recall against known pairs, 1 vs 2 workers, kill and resume."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation import runner
from curation.recipe import parse_recipe
from curation.sources.near_duplicates import jaccard, near_duplicate_pairs
from curation.stats import summarize_pass
from filters.normalization import normalize_batch

pytestmark = pytest.mark.slow
CURATE = [sys.executable, "-m", "curation"]
RECIPE = """
name: dedup-test
source: {kind: parquet}
stages:
  - stage: dedup_exact
  - stage: minhash
    params: {verify: true, threshold: 0.75, partition_records: 1500}
"""


@pytest.fixture(scope="module")
def pairs():
    return near_duplicate_pairs(1500, 0.3, 1.0, seed=1)


@pytest.fixture(scope="module")
def corpus(pairs, tmp_path_factory) -> Path:
    """The pairs' documents shuffled into 4 Parquet shards, with 20 verbatim copies for exact dedup."""
    folder = tmp_path_factory.mktemp("pairs")
    docs = [(f"p{i}{side}", text) for i, pair in enumerate(pairs) for side, text in (("a", pair.original), ("b", pair.copy))]
    docs += [(f"p{i}c", pairs[i].original) for i in range(20)]
    random.Random(0).shuffle(docs)
    for shard in range(4):
        part = docs[shard::4]
        pq.write_table(pa.table({"id": [d for d, _ in part], "text": [t for _, t in part]}), folder / f"in-{shard}.parquet")
    (folder / "recipe.yaml").write_text(RECIPE)
    return folder


def clusters(output: Path, stage_dir: str) -> dict[str, int | None]:
    """Document id -> near_cluster over kept and removed rows (needs --keep-removed)."""
    files = sorted((output / stage_dir).glob("*.parquet")) + sorted((output / "removed" / stage_dir).glob("*.parquet"))
    frame = pd.concat([pq.read_table(f, columns=["id", "near_cluster"]).to_pandas() for f in files])
    return dict(zip(frame["id"], frame["near_cluster"]))


def same_cluster(found: dict, a: str, b: str) -> bool:
    return a in found and b in found and pd.notna(found[a]) and found[a] == found[b]


def score(name: str, similarity: list[float], joined: list[bool]) -> tuple[float, float]:
    frame = pd.DataFrame({"jaccard": similarity, "joined": joined})
    frame["bin"] = pd.cut(frame.jaccard, [0, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0001])
    recall = frame[frame.jaccard >= 0.8].joined.mean()
    false_positives = frame[frame.jaccard <= 0.5].joined.mean()
    print(f"\n{name}: pairs joined per Jaccard bin\n{frame.groupby('bin', observed=True).joined.agg(['mean', 'count']).T.round(3).to_string()}")
    print(f"{name}: recall (J >= 0.8) {recall:.3f} on {(frame.jaccard >= 0.8).sum()}, "
          f"false positives (J <= 0.5) {false_positives:.3f} on {(frame.jaccard <= 0.5).sum()}")  # fmt: skip
    return recall, false_positives


def test_near_duplicate_pairs_at_controlled_jaccard(pairs, corpus, tmp_path):
    import ray

    inputs = sorted(str(p) for p in corpus.glob("in-*.parquet"))
    ray.init(num_cpus=2, object_store_memory=100 * 1024**2, include_dashboard=False)
    try:
        scores = {}
        for verify in (True, False):
            recipe = parse_recipe(
                {"name": "t", "source": {"kind": "parquet"}, "stages": [
                    {"stage": "minhash", "params": {"verify": verify, "threshold": 0.75, "partition_records": 3000}}]},
                "t",
            )  # fmt: skip
            result = runner.run(recipe, inputs, str(tmp_path / f"verify-{verify}"), "test", keep_removed=True)
            assert not result.failures
            found = clusters(tmp_path / f"verify-{verify}", "01_minhash")
            joined = [same_cluster(found, f"p{i}a", f"p{i}b") for i in range(len(pairs))]
            scores[verify] = score(f"14x8, verify={verify}", [p.jaccard for p in pairs], joined)
            assert all(same_cluster(found, f"p{i}a", f"p{i}c") for i in range(20)), "a verbatim copy was missed"
            members = pd.Series(found).dropna()
            pairs_per_cluster = members.groupby(members).apply(lambda ids: len({i[:-1] for i in ids.index}))
            assert (pairs_per_cluster == 1).all(), "a cluster joined documents of different pairs"
    finally:
        ray.shutdown()
    assert scores[True][0] >= 0.95 and scores[True][1] <= 0.01
    assert scores[False][0] >= 0.95  # without the check, the S-curve lets ~5% of pairs at J = 0.5 through


def test_sample_snapshot_ground_truth(sample_snapshot, tmp_path):
    import ray

    truth = pq.read_table(sample_snapshot / "truth.parquet").to_pandas()
    recipe = parse_recipe({"name": "t", "stages": [{"stage": "extract"}, {"stage": "minhash", "params": {"verify": True, "threshold": 0.75}}]}, "t")
    ray.init(num_cpus=2, object_store_memory=100 * 1024**2, include_dashboard=False)
    try:
        inputs = sorted(str(p) for p in sample_snapshot.glob("*.warc.gz"))
        assert not runner.run(recipe, inputs, str(tmp_path / "run"), "sample", keep_removed=True).failures
    finally:
        ray.shutdown()
    files = sorted((tmp_path / "run").glob("02_minhash/*.parquet")) + sorted((tmp_path / "run").glob("removed/02_minhash/*.parquet"))
    docs = pd.concat([pq.read_table(f, columns=["url", "text", "near_cluster"]).to_pandas() for f in files]).set_index("url")
    related = truth[truth.kind.isin(["exact_dup", "near_dup"]) & truth.url.isin(docs.index) & truth.dup_of.isin(docs.index)]
    words = {url: normalize_batch([text], "fineweb")[0].split(" ") for url, text in docs.text.items()}
    similarity = [jaccard(words[row.url], words[row.dup_of]) for row in related.itertuples()]
    found = docs.near_cluster.to_dict()
    joined = [same_cluster(found, row.url, row.dup_of) for row in related.itertuples()]
    recall, false_positives = score("sample snapshot", similarity, joined)
    # 14 x 8 bands find a pair of Jaccard J with probability 1 - (1 - J^8)^14 (0.92 at J = 0.8, 0.99 at 0.86), so on a
    # few pairs a miss is a matter of luck: the misses must be likely under that S-curve (tail probability >= 0.001).
    found_probability = [1 - (1 - j**8) ** 14 for j in similarity if j >= 0.8]
    misses = round((1 - recall) * len(found_probability))
    at_least = [1.0] + [0.0] * len(found_probability)  # Poisson-binomial: P(exactly k misses), built pair by pair
    for p in found_probability:
        at_least = [at_least[k] * p + (at_least[k - 1] * (1 - p) if k else 0.0) for k in range(len(at_least))]
    tail = sum(at_least[misses:])
    print(f"sample snapshot: {misses} of {len(found_probability)} pairs with J >= 0.8 missed; P(>= that many) = {tail:.4f}")
    assert tail >= 0.001 and false_positives == 0
    # every clustered page is a planted duplicate or the original of one
    planted = set(related.url) | set(related.dup_of)
    assert set(docs[docs.near_cluster.notna()].index) <= planted


def curate(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(CURATE + list(args), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def outputs(folder: Path) -> dict[str, pa.Table]:
    return {str(p.relative_to(folder)): pq.read_table(p) for p in sorted(folder.glob("[0-9][0-9]_*/*.parquet"))}


def test_same_result_on_one_and_two_workers_and_after_a_kill_between_steps(corpus, tmp_path):
    inputs, recipe = str(corpus / "in-*.parquet"), str(corpus / "recipe.yaml")
    one, two, killed = tmp_path / "one", tmp_path / "two", tmp_path / "killed"
    curate("run", recipe, "--input", inputs, "--output", str(one), "--num-cpus", "1")
    curate("run", recipe, "--input", inputs, "--output", str(two), "--num-cpus", "2")
    assert outputs(one).keys() == outputs(two).keys() and len(outputs(one)) == 12
    for name, table in outputs(one).items():
        assert table.equals(outputs(two)[name]), name
    kept = sum(t.num_rows for name, t in outputs(one).items() if name.startswith("02_minhash"))
    assert 1500 < kept < 2500

    process = subprocess.Popen(
        CURATE + ["run", recipe, "--input", inputs, "--output", str(killed), "--num-cpus", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    manifest, passes = killed / "manifest.json", {}
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        try:
            passes = json.loads(manifest.read_text())["stages"]["02_minhash"].get("passes", {})
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            passes = {}
        if passes.get("buckets"):
            break
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert passes.get("buckets") and "assign" not in passes, f"the kill did not come inside the pass: {list(passes)}"
    assert len(passes["keys"]) == 4

    rerun = curate("run", recipe, "--input", inputs, "--output", str(killed), "--num-cpus", "2")
    assert "resumed: 8 stage-shard(s)" in rerun.stdout  # read and exact dedup of the 4 shards were not redone
    assert outputs(killed).keys() == outputs(one).keys()
    for name, table in outputs(one).items():
        assert table.equals(outputs(killed)[name]), name
    stats = json.loads((killed / "stats.json").read_text())["stages"][2]["pass"]
    assert stats["keys"] == summarize_pass({"keys": passes["keys"]})["keys"], "recorded key tasks were redone"
    if Path("/proc/self/clear_refs").exists():  # Linux: each task's peak RSS, the largest task's kept
        assert all(0 < step["rss_start_mib"] <= step["rss_peak_mib"] for step in stats.values())
    assert not (killed / "work").exists() or not any((killed / "work").rglob("*.parquet"))
