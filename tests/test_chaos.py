"""Chaos: `curate run` SIGKILLed at random moments (inside dedup passes too), rerun after each kill, ends with the
output of an uninterrupted run; a killed driver's Ray is stopped by the next run, which says so."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow
CURATE = [sys.executable, "-m", "curation", "run", "fineweb-snapshot", "--num-cpus", "2", "--keep-removed"]


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return ""


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def finished_tasks(manifest: Path) -> tuple[int, int]:
    """(stage-shards, dedup pass tasks) the manifest has as done."""
    try:
        stages = json.loads(manifest.read_text())["stages"].values()
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0, 0
    passes = sum(len(tasks) for stage in stages for tasks in stage.get("passes", {}).values())
    return sum(len(stage["shards"]) for stage in stages), passes


def run_folder_state(output: Path) -> tuple[dict, list]:
    """Every Parquet file's table by path, and the per-shard stats without timings and nodes."""
    tables = {str(p.relative_to(output)): pq.read_table(p) for p in sorted(output.rglob("*.parquet"))}
    stats = json.loads((output / "stats.json").read_text())["stages"]
    return tables, [[{k: v for k, v in s.items() if k not in ("seconds", "node")} for s in st["shards"]] for st in stats]


@pytest.fixture(scope="module")
def many_files(tmp_path_factory) -> str:
    from curation.sources import sample

    folder = tmp_path_factory.mktemp("chaos-input")
    sample.generate(folder, pages=480, files=12, seed=21)
    return f"{folder}/*.warc.gz"


def test_five_random_kills_then_a_rerun_equal_an_uninterrupted_run(many_files, tmp_path):
    inputs = many_files
    whole, chaos = tmp_path / "whole", tmp_path / "chaos"
    done = subprocess.run(CURATE + ["--input", inputs, "--output", str(whole)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rng = random.Random(15)
    moments = []
    # when each kill strikes: once the run has made progress, once a dedup pass has, or while it is still starting
    # (Ray start, the manifest read, the resume scan); progress adds up, so the last kill comes early in its run
    for when in ("progress", "pass", "progress", "pass", "starting"):
        process = subprocess.Popen(CURATE + ["--input", inputs, "--output", str(chaos)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        shards_at_start, passes_at_start = finished_tasks(chaos / "manifest.json")
        deadline = time.time() + 120
        while when != "starting" and time.time() < deadline and process.poll() is None:
            shards, passes = finished_tasks(chaos / "manifest.json")
            if (passes > passes_at_start) if when == "pass" else (shards > shards_at_start):
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0.5, 2.0) if when == "starting" else rng.uniform(0, 0.2))
        assert process.poll() is None, f"the run finished before the {when!r} kill: give it more input"
        moments.append((when, *finished_tasks(chaos / "manifest.json")))
        os.killpg(process.pid, signal.SIGKILL)  # the driver and its Ray
        process.wait()
    print(f"kills at (when, stage-shards done, pass tasks done): {moments}")
    assert any(passes for _, _, passes in moments), "no kill landed once a dedup pass had started"
    rerun = subprocess.run(CURATE + ["--input", inputs, "--output", str(chaos)], capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr

    chaos_tables, chaos_stats = run_folder_state(chaos)
    whole_tables, whole_stats = run_folder_state(whole)
    assert sorted(chaos_tables) == sorted(whole_tables)
    for name, table in whole_tables.items():
        assert chaos_tables[name].equals(table), name
    final = next(name for name in sorted(whole_tables, reverse=True) if name.startswith("10_pii/"))
    ids = [i for name, t in chaos_tables.items() if name.startswith("10_pii/") for i in t["id"].to_pylist()]
    assert len(ids) == len(set(ids)) and final
    assert chaos_stats == whole_stats
    assert not [p for p in chaos.rglob("*") if ".tmp-" in p.name]


def test_a_killed_drivers_ray_does_not_outlive_it_and_the_next_run_succeeds(sample_snapshot, tmp_path):
    """Ray kills its processes when their parent dies (the raylet and workers with the driver, even stopped ones),
    and the agent stand-ins leave with the raylet: nothing of a SIGKILLed driver's Ray is left to the next run. What
    the next run does with a leftover that does survive is tests/test_ray_session.py's
    test_a_ray_is_stopped_only_once_its_driver_is_gone."""
    output = tmp_path / "run"
    process = subprocess.Popen(CURATE + ["--input", f"{sample_snapshot}/*.warc.gz", "--output", str(output)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.time() + 120
    while time.time() < deadline and finished_tasks(output / "manifest.json")[0] == 0:
        time.sleep(0.05)
    driver = psutil.Process(process.pid)
    left = [child for child in driver.children(recursive=True) if "ray" in _command(child).lower()]
    assert any(p.name() == "raylet" for p in left) and len(left) >= 4  # GCS, raylet, stand-ins, workers
    process.send_signal(signal.SIGKILL)  # the driver alone, as an OOM kill would
    process.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(map(_running, left)):
        time.sleep(0.2)
    assert not any(map(_running, left))
    rerun = subprocess.run(CURATE + ["--input", f"{sample_snapshot}/*.warc.gz", "--output", str(output)],
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr