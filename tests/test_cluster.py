"""`curate run --ray-address` on a real two-node Ray cluster on this machine: `ray start --head` plus a second
`ray start --address` node with its own temp dir, token authentication on (Ray 2.60's default for clusters)."""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from tests.conftest import finished_shards

pytestmark = pytest.mark.slow
CURATE = [sys.executable, "-m", "curation"]
RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def processes_under(folder: str) -> list[psutil.Process]:
    """The Ray processes a node started: those whose command line names its temp dir (raylet, GCS, ...) and their
    children (its agents and workers retitle themselves `ray::...`)."""
    found = {}
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any(folder in part for part in process.info["cmdline"] or []):
                for member in [process, *process.children(recursive=True)]:
                    found[member.pid] = member
        except psutil.Error:
            continue
    return list(found.values())


TASKS = ("ray::_segment_on_node", "ray::_pass_task_on_node")  # curation.runner's tasks, as Ray titles a worker running one


def title(process: psutil.Process) -> str:
    """A process's command line: a Ray worker's is `ray::FUNCTION` while it runs a task, `ray::IDLE` between tasks."""
    try:
        return " ".join(process.cmdline()).strip()
    except psutil.Error:
        return ""


def kill_node(folder: str) -> list[str]:
    """SIGKILL every process of the node, any worker running a task first; the title of each, read just before its
    kill (a task's title says the kill cut that task)."""
    titles = []
    for process in sorted(processes_under(folder), key=lambda process: not title(process).startswith(TASKS)):
        titles.append(title(process))
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    return titles


def wait_for_a_task(running, folder: str, timeout: float = 120) -> bool:
    """Polls until a worker of the node runs a task, or the run ends or time runs out; whether one does."""
    deadline = time.time() + timeout
    while time.time() < deadline and running.poll() is None:
        if any(title(process).startswith(TASKS) for process in processes_under(folder)):
            return True
        time.sleep(0.02)
    return False


@pytest.fixture(scope="module")
def cluster():
    """(address, environment, second node's temp dir); both nodes are killed at the end, nothing else is."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    head, second = tempfile.mkdtemp(prefix="rh", dir="/tmp"), tempfile.mkdtemp(prefix="rn", dir="/tmp")
    address = f"127.0.0.1:{free_port()}"
    try:
        subprocess.run([RAY, "start", "--head", "--port", address.split(":")[1], "--num-cpus", "1", "--temp-dir", head,
                        "--include-dashboard=false", "--disable-usage-stats"], env=env, check=True, capture_output=True)  # fmt: skip
        subprocess.run([RAY, "start", "--address", address, "--num-cpus", "1", "--temp-dir", second],
                       env=env, check=True, capture_output=True)  # fmt: skip
        yield address, env, second
    finally:
        for folder in (second, head):
            kill_node(folder)
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> str:
    """480 sample pages in 12 files: on a quiet machine the shared 160-page sample could finish before the node was
    killed mid-run."""
    from curation.sources import sample

    folder = tmp_path_factory.mktemp("cluster-input")
    sample.generate(folder, pages=480, files=12, seed=5)
    return f"{folder}/*.warc.gz"


@pytest.fixture(scope="module")
def local_run(inputs, cluster, tmp_path_factory) -> Path:
    """The same recipe on a local Ray, started while the two-node cluster is up: without --ray-address `curate`
    starts a cluster of its own instead of joining (or failing on) the one `ray start` runs on this machine."""
    output = tmp_path_factory.mktemp("local") / "run"
    done = subprocess.run(CURATE + ["run", "fineweb-snapshot", "--input", inputs, "--output", str(output), "--num-cpus", "2"],
                          env=cluster[1], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return output


def documents(output: Path) -> list[tuple[str, str]]:
    table = pq.read_table(sorted(output.glob("[0-9][0-9]_pii"))[0])
    return sorted(zip(table["id"].to_pylist(), table["text"].to_pylist()))


def test_shards_run_on_both_nodes_and_the_output_equals_a_local_run(cluster, inputs, local_run, tmp_path):
    address, env, _ = cluster
    output = tmp_path / "run"
    done = subprocess.run(CURATE + ["run", "fineweb-snapshot", "--input", inputs, "--output", str(output), "--ray-address", address],
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    stages = json.loads((output / "stats.json").read_text())["stages"]
    nodes = {shard["node"] for stage in stages for shard in stage["shards"]}
    print(f"shard tasks per node: { {n[:8]: sum(s['node'] == n for st in stages for s in st['shards']) for n in nodes} }")
    assert len(nodes) == 2
    assert documents(output) == documents(local_run)
    assert len({doc_id for doc_id, _ in documents(output)}) == len(documents(output))


def test_a_node_lost_mid_run_loses_and_duplicates_no_shard(cluster, inputs, local_run, tmp_path):
    """The second node SIGKILLed, raylet and all, while one of its workers runs a shard's task: Ray retries the lost
    task on the head, and the one run finishes (exit 0, no rerun) with every document of a local run, once."""
    address, env, second = cluster
    output = tmp_path / "run"
    command = CURATE + ["run", "fineweb-snapshot", "--input", inputs, "--output", str(output), "--ray-address", address]
    running = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    manifest, total = output / "manifest.json", finished_shards((local_run / "manifest.json").read_text)
    # the first stages' tasks (a file each) are the long ones: the dedup passes' tasks after them last milliseconds,
    # and waiting for the manifest first let a quiet machine finish those before the poll saw one (seen twice)
    busy = wait_for_a_task(running, second)
    assert running.poll() is None, f"the run ended (exit {running.returncode}) before the node was lost"
    killed = kill_node(second)  # its raylet, object store and workers, mid-run
    at_kill = finished_shards(manifest.read_text) if manifest.exists() else 0
    assert at_kill < total, f"the node was lost at {at_kill} of {total} stage-shards: not mid-run"
    log = running.communicate(timeout=600)[0]
    cut = [title for title in killed if title.startswith(TASKS)]
    print(f"killed the second node's {len(killed)} processes, cutting {cut}; the run exited {running.returncode}")
    assert busy and cut, f"the second node ran no task when it was killed: {killed}"
    assert any(title.split()[0].endswith("/raylet") for title in killed), killed
    assert running.returncode == 0, log[-3000:]  # Ray retried the lost task: one run, no rerun
    assert documents(output) == documents(local_run)
    assert not list(output.rglob("*.tmp-*"))


def test_a_refused_join_is_one_line_naming_the_token_settings(cluster, inputs, tmp_path):
    address, env, _ = cluster
    wrong = {**env, "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    done = subprocess.run(CURATE + ["run", "fineweb-snapshot", "--input", inputs, "--output", str(tmp_path / "run"), "--ray-address", address],
                          env=wrong, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"could not join the Ray cluster at {address}" in done.stderr and "RAY_AUTH_TOKEN" in done.stderr
