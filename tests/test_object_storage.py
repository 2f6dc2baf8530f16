"""Run folders on object storage: `curate run/stats/report/tokenize` and `train` on `s3://`, against a real S3 server
(moto's, on 127.0.0.1, started here), not a mock of fsspec; resume after kill -9 there too."""

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import finished_shards, wait_for_progress

pytestmark = pytest.mark.slow
moto_server = pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
s3fs = pytest.importorskip("s3fs", reason="s3fs is in the test extra")
SETTINGS = "seq_len: 64\nglobal_batch: 4\nmicro_batch: 2\nwarmup: 1\ndtype: fp32\nlog_every: 1\n"


def run(*args: str, env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(environment pointing fsspec at the server, filesystem, bucket)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "FSSPEC_S3_ENDPOINT_URL": f"http://{host}:{port}"}  # fmt: skip
    fs = s3fs.S3FileSystem(key="testing", secret="testing", endpoint_url=f"http://{host}:{port}", use_listings_cache=False)
    fs.mkdir("runs")
    yield env, fs, "runs"
    server.stop()


@pytest.fixture(scope="module")
def inputs(sample_snapshot) -> str:
    return f"{sample_snapshot}/*.warc.gz"


@pytest.fixture(scope="module")
def local_run(inputs, tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("local") / "run"
    run("curation", "run", "fineweb-snapshot", "--input", inputs, "--output", str(output), "--num-cpus", "2",
        "--keep-removed", env=dict(os.environ))  # fmt: skip
    return output


def tables(fs, root: str) -> dict[str, object]:
    """Every Parquet file of a run folder (local or on S3) by its path inside the run."""
    found = {}
    for path in sorted(fs.find(root)):
        if path.endswith(".parquet") and "/tokens/" not in path:
            with fs.open(path, "rb") as handle:
                found[path[len(root) :].lstrip("/")] = pq.read_table(handle)
    return found


def shard_stats(stats: dict) -> list:
    return [[{k: v for k, v in s.items() if k not in ("seconds", "node")} for s in stage["shards"]] for stage in stats["stages"]]


def test_curate_killed_on_s3_resumes_to_a_local_runs_output_and_trains_there(s3, inputs, local_run, tmp_path):
    """Killed twice mid-run (each time after one more finished stage-shard, the run still going and unfinished), then
    resumed: the output on S3 equals the uninterrupted local run and the last run skips what the killed ones finished;
    `curate stats/report/tokenize` and `train` then work on that S3 folder. One S3 run serves both claims: curating
    on S3 costs a minute, and a resumed run writes its output as an uninterrupted one does."""
    env, fs, bucket = s3
    url = f"s3://{bucket}/run"
    command = [sys.executable, "-m", "curation", "run", "fineweb-snapshot", "--input", inputs, "--output", url,
               "--num-cpus", "2", "--keep-removed"]  # fmt: skip
    total = finished_shards((local_run / "manifest.json").read_text)
    finished = 0
    for _ in range(2):
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        progress = wait_for_progress(process, lambda: fs.cat(f"{bucket}/run/manifest.json").decode(), at_least=finished + 1)
        assert process.poll() is None, f"the run ended (exit {process.returncode}) before the kill: nothing to resume"
        os.killpg(process.pid, signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL
        finished = finished_shards(lambda: fs.cat(f"{bucket}/run/manifest.json").decode())
        assert progress <= finished < total, f"the kill came at {finished} of {total} stage-shards: not mid-run"
    resumed_run = run(*command[2:], env=env)
    assert f"resumed: {finished} stage-shard(s)" in resumed_run.stdout
    from fsspec.implementations.local import LocalFileSystem

    on_s3, local = tables(fs, f"{bucket}/run"), tables(LocalFileSystem(), str(local_run))
    assert sorted(on_s3) == sorted(local) and "decontamination.parquet" in on_s3 and any(p.startswith("removed/") for p in on_s3)
    for name, table in local.items():
        assert on_s3[name].equals(table), name
    assert shard_stats(json.loads(fs.cat(f"{bucket}/run/stats.json"))) == shard_stats(json.loads((local_run / "stats.json").read_text()))
    assert not fs.exists(f"{bucket}/run/work/07_dedup_exact") and not [p for p in fs.find(bucket) if ".tmp-" in p]

    assert "Curation funnel" in run("curation", "stats", url, env=env).stdout
    run("curation", "report", url, env=env)
    assert fs.cat(f"{bucket}/run/report.html").startswith(b"<html>")
    run("curation", "tokenize", url, "--vocab-size", "1024", env=env)
    assert fs.exists(f"{bucket}/run/tokens/tokenizer.json") and fs.glob(f"{bucket}/run/tokens/part-*.parquet")

    (tmp_path / "s3.yaml").write_text(f"name: s3\nsources:\n  web: {{paths: ['{url}/tokens/part-*.parquet']}}\n")
    (tmp_path / "settings.yaml").write_text(SETTINGS)
    run("training", "--mixture", "s3.yaml", "--config", "settings.yaml", "--steps", "3", "--out", "trained", env=env, cwd=tmp_path)
    metrics = [json.loads(line) for line in (tmp_path / "trained" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss" in m][-1] == 3


def test_tokenize_on_s3_writes_the_parts_a_local_run_writes_and_a_rerun_skips_them(s3, tmp_path):
    """A curated run folder on S3 tokenized on Ray (workers open the parts there), then again: nothing redone."""
    from tests.test_tokenize import curated_run, prose

    env, fs, bucket = s3
    local = Path(curated_run(tmp_path / "local", "web", prose(2), parts=6))
    fs.put(str(local), f"{bucket}/tok", recursive=True)
    command = ("curation", "tokenize", "--vocab-size", "500", "--num-cpus", "2")
    run(*command, str(local), env=env)
    run(*command, "--tokenizer", str(local / "tokens" / "tokenizer.json"), f"s3://{bucket}/tok", env=env)
    stats = json.loads(fs.cat(f"{bucket}/tok/tokens/stats.json"))
    assert stats == json.loads((local / "tokens" / "stats.json").read_text())  # shards' bytes and sha256 included
    assert len(fs.glob(f"{bucket}/tok/tokens/parts/part-*.json")) == 6 and not [p for p in fs.find(bucket) if ".tmp-" in p]
    again = run(*command, "--tokenizer", str(local / "tokens" / "tokenizer.json"), f"s3://{bucket}/tok", env=env)
    assert "resumed: 6 part(s) were already tokenized and skipped" in again.stdout
