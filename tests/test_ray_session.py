"""The record of a local Ray's processes: a killed driver's Ray is stopped by the next run of its folder, a running
driver's never is (the same folder used from another shell, or `curate tokenize` beside a `curate run`)."""

import json
import subprocess
import sys

import psutil

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
