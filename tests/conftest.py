import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SHARED_DATA", ROOT.parent / "shared" / "data")).resolve()


def shared(relative: str) -> Path:
    """A file of ../shared/data, or a skip naming what is missing (a user's clone has no shared/)."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"{path} is absent: real-data tests need ../shared/data (see its README)")
    return path


def finished_shards(read_manifest: Callable[[], str]) -> int:
    """Stage-shards a run's manifest records as finished; 0 while it is absent or half-written."""
    try:
        return sum(len(stage["shards"]) for stage in json.loads(read_manifest())["stages"].values())
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


def wait_for_progress(running, read_manifest: Callable[[], str], at_least: int = 1, timeout: float = 300) -> int:
    """Polls a run's manifest until it records `at_least` finished stage-shards, the run ends or time runs out; the
    count seen. A kill-and-resume test kills right after it and asserts the run was still going (mid-run)."""
    deadline, finished = time.time() + timeout, 0
    while time.time() < deadline and running.poll() is None:
        finished = finished_shards(read_manifest)
        if finished >= at_least:
            break
        time.sleep(0.05)
    return finished


@pytest.fixture(scope="session")
def sample_snapshot(tmp_path_factory) -> Path:
    """A small built-in sample snapshot shared by the tests: 160 pages in 4 WARC files."""
    from curation.sources import sample

    out = tmp_path_factory.mktemp("sample")
    sample.generate(out, pages=160, files=4, seed=0)
    return out
