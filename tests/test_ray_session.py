"""The record of a local Ray's processes: a killed driver's Ray is stopped by the next run of its folder, a running
driver's never is (the same folder used from another shell, or `curate tokenize` beside a `curate run`)."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from curation import ray_session


def test_a_ray_is_stopped_only_once_its_driver_is_gone(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_session, "cache_root", lambda: tmp_path)
    ray_worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        worker = psutil.Process(ray_worker.pid)
        record = ray_session._record("runs/x")
        record.parent.mkdir(parents=True)
        me = psutil.Process()
        record.write_text(json.dumps({"driver": [me.pid, me.create_time()], "processes": [[worker.pid, worker.create_time()]]}))
        ray_session._stop_leftovers("runs/x")
        assert ray_worker.poll() is None and record.is_file()  # its driver (this process) still runs

        gone = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        gone_started = psutil.Process(gone.pid).create_time()
        gone.communicate()  # ends once its stdin closes
        record.write_text(json.dumps({"driver": [gone.pid, gone_started], "processes": [[worker.pid, worker.create_time()]]}))
        ray_session._stop_leftovers("runs/x")
        assert ray_worker.wait(timeout=10) == -9 and not record.exists()
    finally:
        ray_worker.kill()


def test_a_ray_address_where_nothing_listens_is_one_line_within_seconds(sample_snapshot, tmp_path):
    """Ray itself retried for minutes there, printing `Failed to get cluster ID from GCS server: TimedOut`."""
    with socket.socket() as closed:  # bound and never listening: a connection to it is refused
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        done = subprocess.run([sys.executable, "-m", "curation", "run", "fineweb-snapshot", "--input",
                               f"{sample_snapshot}/*.warc.gz", "--output", str(tmp_path / "run"), "--ray-address", address],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        with pytest.raises(SystemExit, match=f"no Ray cluster answers at --ray-address ray://{address} "):
            ray_session._check_reachable(f"ray://{address}")  # Ray Client's address, as its grpcio would dial it
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"no Ray cluster answers at --ray-address {address} " in done.stderr
    with socket.create_server(("", 0)) as listening:  # a port that answers is left to ray.init
        ray_session._check_reachable(f"127.0.0.1:{listening.getsockname()[1]}")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_agent_stand_in_writes_the_ports_ray_waits_for_and_leaves_with_its_raylet(tmp_path):
    """A stand-in whose parent (the raylet) is gone exits by itself: a SIGKILLed raylet leaves nothing behind."""
    standin = str(Path(ray_session.__file__).with_name("ray_agent_standin.py"))
    args = [f"--session-dir={tmp_path}", "--node-id=abc", "--node-ip-address=127.0.0.1"]
    launcher = (  # plays the raylet: starts both stand-ins, prints their pids, exits once they have written their ports
        "import os, subprocess, sys, time\n"
        "for agent in ('ray/dashboard/agent.py', 'ray/_private/runtime_env/agent/main.py'):\n"
        f"    print(subprocess.Popen([sys.executable, {standin!r}, agent, *{args!r}], stdout=subprocess.DEVNULL, "
        "stderr=subprocess.DEVNULL).pid, flush=True)\n"
        f"while len([n for n in os.listdir({str(tmp_path)!r}) if n.endswith('_abc')]) < 4:\n"
        "    time.sleep(0.05)\n"
    )
    done = subprocess.run([sys.executable, "-c", launcher], capture_output=True, text=True, timeout=60)
    pids = [int(pid) for pid in done.stdout.split()]
    try:
        assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(map(_running, pids)):
            time.sleep(0.2)
        assert not any(map(_running, pids))
        for name in ("metrics_agent_port", "metrics_export_port", "dashboard_agent_listen_port"):
            assert (tmp_path / f"{name}_abc").read_text() == "-1"
        assert int((tmp_path / "runtime_env_agent_port_abc").read_text()) > 0
        assert not list(tmp_path.glob("*.tmp"))
    finally:
        for pid in filter(_running, pids):
            psutil.Process(pid).kill()


@pytest.mark.slow
def test_a_local_ray_runs_tasks_without_ray_agents_and_refuses_runtime_environments_at_once(tmp_path, monkeypatch):
    import ray

    if ray.__version__.rsplit(".", 1)[0] not in ray_session.STAND_IN_CHECKED_ON:
        pytest.skip(f"Ray {ray.__version__} starts with its own agents: the stand-in was checked on {ray_session.STAND_IN_CHECKED_ON}")
    monkeypatch.setattr(ray_session, "cache_root", lambda: tmp_path)
    started = ray_session.connect(None, 2, owner=str(tmp_path / "run"))
    try:
        assert started
        processes = []
        for child in psutil.Process().children(recursive=True):
            try:  # a child an earlier test left unreaped (a zombie) has no command line
                if child.name() != "raylet":
                    processes.append(" ".join(child.cmdline()))
            except (psutil.ZombieProcess, psutil.NoSuchProcess):
                continue
        agents = [line for line in processes if "dashboard/agent.py" in line or "runtime_env/agent" in line]
        assert len(agents) == 2 and all("ray_agent_standin.py" in line for line in agents)
        assert not [line for line in processes if "dashboard/dashboard.py" in line or "monitor.py" in line]

        @ray.remote
        def variable():
            return os.environ.get("CURATE_TEST_VARIABLE")

        assert ray.get(variable.remote(), timeout=60) is None
        began = time.monotonic()
        with pytest.raises(ray.exceptions.RuntimeEnvSetupError, match="curate's local Ray runs no runtime-env agent"):
            ray.get(variable.options(runtime_env={"env_vars": {"CURATE_TEST_VARIABLE": "1"}}).remote(), timeout=60)
        assert time.monotonic() - began < 30  # an answer, not a wait for the timeout
    finally:
        ray_session.disconnect(started, owner=str(tmp_path / "run"))


@pytest.mark.slow
def test_a_raylet_that_dies_at_start_is_one_error_at_once_and_leaves_no_process(tmp_path, monkeypatch):
    """The raylet exits with its agents: a stand-in that cannot start takes it down. The run says so within seconds
    (Ray itself retried for 30 s, then 30 more) and no half-started Ray outlives the attempt."""
    import ray

    if ray.__version__.rsplit(".", 1)[0] not in ray_session.STAND_IN_CHECKED_ON:
        pytest.skip(f"Ray {ray.__version__} starts with its own agents")
    monkeypatch.setattr(ray_session, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(ray_session, "Path", lambda _: tmp_path / "missing" / "ray_session.py")  # the stand-in's script
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    began = time.monotonic()
    with pytest.raises(SystemExit, match="raylet exited at start-up"):
        ray_session.connect(None, 1, owner=str(tmp_path / "run"))
    assert time.monotonic() - began < 25
    time.sleep(0.5)
    assert not [c for c in psutil.Process().children(recursive=True) if c.pid not in before and _running(c.pid)]
