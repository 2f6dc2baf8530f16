import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SHARED_DATA", ROOT.parent / "shared" / "data")).resolve()
SHARED_CORPUS = Path(os.environ.get("SHARED_CORPUS", ROOT.parent / "shared" / "corpus")).resolve()


def shared(relative: str, root: Path = SHARED_DATA) -> Path:
    """A file of ../shared/data (or of `root`, e.g. SHARED_CORPUS), or a skip naming what is missing (a user's clone
    has no shared/)."""
    path = root / relative
    if not path.exists():
        pytest.skip(f"{path} is absent: real-data tests need {root} (see its README)")
    return path


def finished_shards(read_manifest: Callable[[], str]) -> int:
    """Stage-shards a run's manifest records as finished; 0 while it is absent or half-written."""
    try:
        return sum(len(stage["shards"]) for stage in json.loads(read_manifest())["stages"].values())
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


def interruptible(command: list[str], **options) -> subprocess.Popen:
    """`command` as a terminal starts a foreground job, for a test to Ctrl-C it (SIGINT to its group): its own process
    group, SIGINT at its default. A background job of a non-interactive shell (`pytest ... &` in a script) ignores
    SIGINT and its children inherit that, so without this the signal never reached the command (a run then finished
    with 0)."""
    return subprocess.Popen(command, start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            **options)  # fmt: skip


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


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m ARGS` in `cwd`, which must succeed (its output's end is the failure message)."""
    done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


TRAIN_SETTINGS = "seq_len: 64\nglobal_batch: 8\nmicro_batch: 2\nwarmup: 2\ndtype: fp32\nlog_every: 1\nkeep_checkpoints: 10\n"


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    """For the training tests: a curated, tokenized sample run, a two-phase curriculum over its shards (two.yaml) and
    a training config (settings.yaml)."""
    from curation.sources import sample

    folder = tmp_path_factory.mktemp("train")
    sample.generate(folder / "snapshot", pages=200, files=4, seed=5)
    run("curation", "run", "fineweb-snapshot", "--input", str(folder / "snapshot" / "*.warc.gz"), "--output", "curated",
        "--num-cpus", "2", cwd=folder)  # fmt: skip
    run("curation", "tokenize", "curated", "--vocab-size", "2048", "--validation-fraction", "0.1", cwd=folder)
    (folder / "two.yaml").write_text(
        "name: two\nsources:\n"
        "  web: {paths: ['curated/tokens/part-0000[0-2].parquet']}\n"
        "  more: {paths: ['curated/tokens/part-00003.parquet']}\n"
        "phases:\n"
        "  - {name: warm, fraction: 0.5, weights: {web: 0.9, more: 0.1}}\n"
        "  - {name: anneal, weights: {web: 0.3, more: 0.7}}\n"
    )
    (folder / "settings.yaml").write_text(TRAIN_SETTINGS)
    return folder
