"""The real `curate` CLI and runner on a local Ray cluster: real WARC slices, resume after kill -9, config change."""

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curation import report, stats
from curation.recipe import load_recipe
from curation.sources import sample
from tests.conftest import SHARED_DATA, finished_shards, interruptible, shared, wait_for_progress

pytestmark = pytest.mark.slow
CURATE = [sys.executable, "-m", "curation"]


def curate(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(CURATE + list(args), capture_output=True, text=True, cwd=cwd, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def parts(output: Path) -> dict[str, Path]:
    return {str(p.relative_to(output)): p for p in sorted(output.glob("[0-9][0-9]_*/*"))}


@pytest.fixture(scope="module")
def snapshot_files(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("resume-input")
    sample.generate(folder, pages=240, files=8, seed=3)
    return folder


def curate_once(snapshot_files: Path, folder: Path, *flags: str) -> Path:
    output = folder / "run"
    curate("run", "fineweb-snapshot", "--input", f"{snapshot_files}/*.warc.gz", "--output", str(output), "--num-cpus", "2",
           "--keep-removed", "--keep-intermediate", *flags)  # fmt: skip
    return output


@pytest.fixture(scope="module")
def fused_run(snapshot_files, tmp_path_factory) -> Path:
    """An uninterrupted run, read by several tests (none writes to it): fused, with the removed documents."""
    return curate_once(snapshot_files, tmp_path_factory.mktemp("fused"))


@pytest.fixture(scope="module")
def materialized_run(snapshot_files, tmp_path_factory) -> Path:
    """The same with every stage written; a test that reruns into it works on a copy."""
    return curate_once(snapshot_files, tmp_path_factory.mktemp("materialized"), "--materialize-all")


def test_real_warc_slices_end_to_end(tmp_path):
    shared("warc/cc-main-2020-34-sample.warc.gz")
    output = tmp_path / "run"
    done = curate("run", "fineweb-snapshot", "--input", f"{SHARED_DATA}/warc/*.gz", "--output", str(output),
                  "--num-cpus", "2", "--keep-removed", "--materialize-all", "--keep-intermediate")  # fmt: skip
    assert "Curation funnel" in done.stdout and "03_langid" in done.stdout
    frame = stats.load(str(output))
    read = frame[frame.stage == "00_read"].set_index("input")
    cc = read.loc[str(SHARED_DATA / "warc" / "cc-main-2020-34-sample.warc.gz")]
    assert cc.docs_out == 16
    for stage in ("02_extract", "03_langid"):
        rows = frame[frame.stage == stage]
        dropped = rows[[c for c in rows.columns if c.startswith("dropped_")]].sum(axis=1)
        assert ((rows.docs_out + dropped) == rows.docs_in).all(), f"{stage} lost documents"
    extracted = sum(pq.read_table(p).num_rows for p in (output / "02_extract").glob("*.parquet"))
    removed = sum(pq.read_table(p).num_rows for p in (output / "removed" / "02_extract").glob("*.parquet"))
    assert extracted + removed == read.docs_out.sum() == 16 + 1 + 1 + 22 + 15
    assert "05_heuristics" in done.stdout
    kept = pq.read_table(output / "03_langid").to_pandas()
    assert set(kept.language) == {"en"} and (kept.language_score >= 0.65).all()
    assert "Curation funnel" in curate("stats", str(output)).stdout
    printed, summed = stats.stage_totals(str(output)), stats.funnel(frame)  # the CLI's pandas-free sums are the frame's
    assert list(printed) == list(summed.index)
    assert all(printed[stage].get(column, 0) == pytest.approx(summed.loc[stage, column]) for stage in printed for column in summed.columns)


def test_resume_after_kill_gives_the_uninterrupted_output(snapshot_files, fused_run, tmp_path):
    inputs, whole, resumed = f"{snapshot_files}/*.warc.gz", fused_run, tmp_path / "resumed"
    process = subprocess.Popen(
        CURATE + ["run", "fineweb-snapshot", "--input", inputs, "--output", str(resumed), "--num-cpus", "1", "--keep-removed",
                  "--keep-intermediate"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    manifest, lock = resumed / "manifest.json", resumed / "run.lock"
    deadline = time.time() + 120
    while not lock.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    other = sorted(snapshot_files.glob("*.warc.gz"))[0]
    second = subprocess.run(CURATE + ["run", "fineweb-snapshot", "--input", str(other), "--output", str(resumed)],
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert process.poll() is None, "the first run ended before the second was tried: nothing shows it is refused"
    assert second.returncode == 2 and second.stderr.strip() == (
        f"curate: {resumed} is in use by curate run (pid {process.pid} on {socket.gethostname()}): wait for it to finish "
        f"or stop it; if it is gone, delete {resumed}/run.lock"
    )  # fmt: skip
    progress = wait_for_progress(process, manifest.read_text, at_least=5)
    assert process.poll() is None, f"the run ended (exit {process.returncode}) before the kill: nothing to resume"
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    assert json.loads(lock.read_text())["pid"] == process.pid  # the killed run's lock: the rerun takes it over
    finished, total = finished_shards(manifest.read_text), finished_shards((whole / "manifest.json").read_text)
    assert 5 <= progress <= finished < total, f"the kill came at {finished} of {total} stage-shards: not a partial run"
    before = {name: (path.stat().st_mtime_ns, path.stat().st_ino) for name, path in parts(resumed).items()}
    done_before = json.loads(manifest.read_text())["stages"]

    rerun = curate("run", "fineweb-snapshot", "--input", inputs, "--output", str(resumed), "--num-cpus", "2", "--keep-removed",
                   "--keep-intermediate")  # fmt: skip
    assert f"resumed: {finished} stage-shard(s)" in rerun.stdout
    assert list(parts(resumed)) == list(parts(whole)), "missing, extra or leftover temporary parts"
    for name, path in parts(whole).items():
        assert pq.read_table(parts(resumed)[name]).equals(pq.read_table(path)), name
    finished_parts = [f"{stage_dir}/part-{int(shard):05d}.parquet" for stage_dir, entry in done_before.items() for shard in entry["shards"]]
    kept = [name for name in finished_parts if name in before]  # a fused run writes only boundary stages' parts
    assert kept, f"no finished part was on disk at the kill ({finished_parts}): nothing shows a part is not redone"
    for name in kept:
        path = parts(resumed)[name]
        assert (path.stat().st_mtime_ns, path.stat().st_ino) == before[name], f"{name} was redone"
    assert json.loads(manifest.read_text())["stages"].keys() == done_before.keys()


def test_changed_stage_reruns_it_and_what_follows_only(snapshot_files, materialized_run, tmp_path):
    inputs, output = f"{snapshot_files}/*.warc.gz", tmp_path / "run"
    shutil.copytree(materialized_run, output)  # with each file's mtime, which tells a rewritten part
    before = {name: path.stat().st_mtime_ns for name, path in parts(output).items()}
    recipe = tmp_path / "stricter.yaml"
    recipe.write_text(
        (Path(__file__).parents[1] / "curation/recipes/fineweb-snapshot.yaml").read_text().replace("0.65", "0.9")
    )
    rerun = curate("run", str(recipe), "--input", inputs, "--output", str(output), "--num-cpus", "2", "--keep-removed",
                   "--materialize-all", "--keep-intermediate")  # fmt: skip
    assert "resumed: 24 stage-shard(s)" in rerun.stdout
    after = {name: path.stat().st_mtime_ns for name, path in parts(output).items()}
    later = ("03_langid", "04_badwords", "05_heuristics", "06_quality", "07_dedup_exact", "08_minhash", "09_decontam", "10_pii")
    assert [n for n in after if after[n] != before[n]] == [n for n in after if n.startswith(later)]
    frame = stats.load(str(output))
    assert frame[frame.stage == "03_langid"].docs_out.sum() < frame[frame.stage == "03_langid"].docs_in.sum()
    assert (pq.read_table(output / "03_langid").to_pandas().language_score >= 0.9).all()


def test_fused_and_materialized_runs_write_the_same_documents_and_stats(snapshot_files, fused_run, materialized_run):
    """Stages between two dedup stages run fused in memory and write once; --materialize-all writes every stage."""
    fused, materialized = fused_run, materialized_run
    assert sorted({name.split("/")[0] for name in parts(fused)}) == ["06_quality", "07_dedup_exact", "10_pii"]
    assert len(parts(materialized)) == 11 * 8
    for name, path in parts(fused).items():
        assert pq.read_table(path).equals(pq.read_table(parts(materialized)[name])), name
    removed = sorted(p.relative_to(fused) for p in (fused / "removed").rglob("*.parquet"))
    assert removed == sorted(p.relative_to(materialized) for p in (materialized / "removed").rglob("*.parquet")) and removed
    for name in removed:
        assert pq.read_table(fused / name).equals(pq.read_table(materialized / name)), name
    assert pq.read_table(fused / "decontamination.parquet").equals(pq.read_table(materialized / "decontamination.parquet"))
    truth = pq.read_table(snapshot_files / "truth.parquet").to_pandas()  # the planted bad-words pages, dropped as such
    badwords = pq.read_table(fused / "removed" / "04_badwords").to_pandas()
    lines = truth[truth.badwords == "lines"]
    carriers = set(lines.doc_id) | set(truth[truth.dup_of.isin(lines.url)].doc_id)  # with their copies
    assert set(badwords.drop_reason) == {"badwords/en"} and set(badwords.id) <= carriers and set(lines.doc_id) & set(badwords.id)

    def without_seconds(run: Path):
        return [[{k: v for k, v in shard.items() if k not in ("seconds", "node", "part_sha256")} for shard in stage["shards"]]
                for stage in json.loads((run / "stats.json").read_text())["stages"]]  # fmt: skip

    assert without_seconds(fused) == without_seconds(materialized)
    # the documents language ID removed are the same; a fused run wrote its kept ones after the quality stage
    assert report.language_figure(str(materialized)).axes[0].get_title() == "language (03_langid)"
    assert report.language_figure(str(fused)).axes[0].get_title() == "language (03_langid; kept as written after 06_quality)"


def test_a_failing_file_is_named_and_the_rest_finishes_up_to_dedup(snapshot_files, tmp_path):
    """Dedup needs every shard: the run goes as far as it can, names the file at fault, and stops before dedup."""
    import ray

    from curation import runner

    ray.init(num_cpus=2, object_store_memory=100 * 1024**2, include_dashboard=False)
    try:
        good = str(snapshot_files / "sample-0000.warc.gz")
        missing = str(tmp_path / "gone.warc.gz")
        result = runner.run(load_recipe("fineweb-snapshot"), [good, missing], str(tmp_path / "run"), "sample")
    finally:
        ray.shutdown()
    assert [(f.stage, f.shard) for f in result.failures] == [("00_read", 1), ("07_dedup_exact", 0)]
    assert result.failures[0].input == missing and "No such file" in result.failures[0].error
    assert "shard 1 failed at 00_read" in result.failures[1].error
    assert not any(failure.rerun_fixes for failure in result.failures)  # a rerun without the file fails the same way
    assert (tmp_path / "run" / "06_quality" / "part-00000.parquet").exists()


def test_with_two_tasks_in_flight_the_run_writes_what_it_writes_with_all_in_flight(snapshot_files, tmp_path, monkeypatch):
    """The driver submits tasks as others finish (its ray.wait costs O(tasks pending)), shards, a dedup pass's tasks
    and the shards it releases alike; the outputs are the same."""
    import ray

    from curation import runner

    inputs = sorted(str(path) for path in snapshot_files.glob("*.warc.gz"))
    waited_on, wait = [], ray.wait

    def counting_wait(refs, **kwargs):
        waited_on.append(len(refs))
        return wait(refs, **kwargs)

    monkeypatch.setattr(ray, "wait", counting_wait)
    ray.init(num_cpus=2, object_store_memory=100 * 1024**2, include_dashboard=False)
    try:
        for name, least, per_cpu in (("all", 100, 4), ("two", 2, 0)):
            monkeypatch.setattr(runner, "MIN_IN_FLIGHT", least)
            monkeypatch.setattr(runner, "IN_FLIGHT_PER_CPU", per_cpu)
            waited_on.clear()
            assert not runner.run(load_recipe("fineweb-snapshot"), inputs, str(tmp_path / name), "sample", keep_removed=True).failures
            most = max(waited_on)
    finally:
        ray.shutdown()
    assert most == 2 and len(inputs) == 8
    assert list(parts(tmp_path / "two")) == list(parts(tmp_path / "all"))
    for name, path in parts(tmp_path / "all").items():
        assert pq.read_table(parts(tmp_path / "two")[name]).equals(pq.read_table(path)), name


def test_the_cli_exits_1_naming_a_corrupt_file_among_good_ones_and_the_fixed_rerun_exits_0(tmp_path):
    """`curate run` itself (a subprocess, as a user or a scheduler sees it): a Parquet input cut short beside two good
    ones fails its shard, dedup does not run without it, the exit code is 1 and the file is named; once the file is
    fixed, the same command finishes with 0 and keeps the good shards it had read."""
    import pyarrow as pa

    for k in range(3):
        pq.write_table(pa.table({"id": [f"{k}-{i}" for i in range(20)], "url": [f"https://e.org/{k}/{i}" for i in range(20)],
                                 "text": [f"document {i % 7} of the corpus" for i in range(20)]}), tmp_path / f"docs-{k}.parquet")  # fmt: skip
    good = (tmp_path / "docs-1.parquet").read_bytes()
    (tmp_path / "docs-1.parquet").write_bytes(good[: len(good) // 2] + good[-8:])  # the footer's length and magic, no footer
    (tmp_path / "recipe.yaml").write_text("name: p\nsource: {kind: parquet}\nstages:\n  - stage: dedup_exact\n")
    command = CURATE + ["run", str(tmp_path / "recipe.yaml"), "--input", str(tmp_path / "docs-*.parquet"),
                        "--output", str(tmp_path / "run"), "--num-cpus", "1"]  # fmt: skip
    failed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    log = " ".join((failed.stdout + failed.stderr).split())  # rich wraps long lines
    assert failed.returncode == 1, log
    assert f"failed 00_read shard 1 ({tmp_path / 'docs-1.parquet'})" in log and "ArrowInvalid" in log
    assert "failed 01_dedup_exact shard 0" in log and "3 shard(s) failed on their input or the recipe: fix" in log
    assert "rerun the same command to retry" not in log  # it would fail the same way
    assert not (tmp_path / "run" / "01_dedup_exact").exists()

    (tmp_path / "docs-1.parquet").write_bytes(good)
    fixed = curate(*command[len(CURATE) :])
    assert "resumed: 2 stage-shard(s)" in fixed.stdout and "done:" in fixed.stdout
    kept = pq.read_table(tmp_path / "run" / "01_dedup_exact")
    assert kept.num_rows == 7 and sorted(set(kept["text"].to_pylist())) == [f"document {i} of the corpus" for i in range(7)]


def test_several_recipes_run_in_one_command_on_one_ray(tmp_path):
    """`curate run A B` checks both recipes, then runs each on its built-in input into runs/<recipe> on a single local
    Ray (Ray names each session folder after the process that started it); a flag naming one run's data is refused."""
    refused = subprocess.run(CURATE + ["run", "text-corpus", "fineweb-snapshot", "--output", "x"], capture_output=True,
                             text=True, cwd=tmp_path, timeout=600)  # fmt: skip
    assert refused.returncode == 2 and "--output names one recipe's data" in refused.stderr
    twice = subprocess.run(CURATE + ["run", "text-corpus", "text-corpus"], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert twice.returncode == 2 and "two recipes would write runs/text-corpus" in twice.stderr
    command = CURATE + ["run", "text-corpus", "fineweb-snapshot", "--max-files", "1", "--sample-pages", "30",
                        "--sample-files", "1", "--num-cpus", "2"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    log = process.communicate(timeout=600)[0]
    assert process.returncode == 0, log
    assert "done: runs/text-corpus" in log and "done: runs/fineweb-snapshot" in log
    for name in ("text-corpus", "fineweb-snapshot"):
        assert json.loads((tmp_path / "runs" / name / "stats.json").read_text())["stages"]
    from ray._common.utils import get_default_ray_temp_dir

    assert len(list(Path(get_default_ray_temp_dir()).glob(f"session_*_{process.pid}"))) == 1


STOPPED = ["curate run: stopped; rerun the same command to resume (finished work is kept)"]


def test_ctrl_c_stops_a_run_in_one_line_and_it_resumes(tmp_path):
    """SIGINT to the process group, as a terminal's Ctrl-C: one line saying how to go on, no traceback; the rerun
    resumes from what finished."""
    snapshot_files = tmp_path / "input"
    sample.generate(snapshot_files, pages=960, files=24, seed=3)
    output = tmp_path / "run"
    command = CURATE + ["run", "fineweb-snapshot", "--input", f"{snapshot_files}/*.warc.gz", "--output", str(output)]
    process = interruptible(command + ["--num-cpus", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_progress(process, (output / "manifest.json").read_text, at_least=2)
    assert process.poll() is None, "the run ended before Ctrl-C"
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130 and stderr.strip().splitlines() == STOPPED, (process.returncode, stderr)
    rerun = curate(*command[len(CURATE) :], "--num-cpus", "2")
    assert "resumed:" in rerun.stdout and not (output / "run.lock").exists() and not list(output.rglob("*.tmp-*"))


def test_ctrl_c_while_ray_starts_stops_in_one_line_and_the_rerun_finishes(tmp_path):
    """SIGINT once the driver's core-worker log appears, i.e. while ray.init builds Ray's C++ core worker: a
    KeyboardInterrupt raised in there crashed the interpreter at exit (SIGSEGV, exit 139, 5 of 5 tries)."""
    from ray._common.utils import get_default_ray_temp_dir

    sample.generate(tmp_path / "input", pages=40, files=2, seed=3)
    output = tmp_path / "run"
    command = CURATE + ["run", "fineweb-snapshot", "--input", f"{tmp_path}/input/*.warc.gz", "--output", str(output),
                        "--num-cpus", "1"]  # fmt: skip
    launched = time.time() - 1  # a log of an earlier process with the same pid (pids are reused) is older
    process = interruptible(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    core_worker_log = f"{get_default_ray_temp_dir()}/session_*_{process.pid}/logs/python-core-driver-*_{process.pid}.log"

    def ours() -> list[str]:
        return [path for path in glob.glob(core_worker_log) if os.path.getmtime(path) >= launched]

    deadline = time.monotonic() + 300
    while not ours() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None and not (output / "manifest.json").exists(), "Ray started before Ctrl-C"
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130 and stderr.strip().splitlines() == STOPPED, (process.returncode, stderr)
    assert "done:" in curate(*command[len(CURATE) :]).stdout
