"""`train`'s ranks under torchrun, tied to the `train` process that started them.

torchrun starts each rank in a session of its own, so killing `train`'s process group would leave them training
and writing checkpoints. Here torchrun's agent runs inside `train` itself, and every rank asks the kernel to
SIGKILL it when its parent (the agent) dies, so whatever stops `train`, SIGKILL included, stops every rank. Ctrl-C
(or SIGTERM) stops the ranks and prints one line. A rank that fails for a reason it can name (a full disk) prints one
line and exits REPORTED, which the launcher does not repeat; torchrun's own logging and error report stay quiet.
With --max-restarts N, ranks that die otherwise (a SIGKILL, a crash) are all started again from the last complete
checkpoint, with one line per restart. One rank without --max-restarts runs in `train`'s own process (`run_here`).
"""

import ctypes
import errno
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

LAUNCHER_PID = "TRAIN_LAUNCHER_PID"  # set by `train` for the ranks it launches
REPORTED = 3  # a rank's exit code once it printed its one-line error
# a collective fails on every rank when one dies: the agent stops the others (SIGTERM) within this many seconds, so
# only the dead one is named, not their tracebacks
PEER_GRACE_S = 3
_PR_SET_PDEATHSIG = 1


def launch(argv: list[str], ranks: int, out: Path, max_restarts: int = 0) -> int:
    """Run `python -m training ARGV` on `ranks` local ranks under torchrun's agent, in this process; the exit code.
    When a rank dies without saying why (killed, a crash), all of them run again with --resume, up to `max_restarts`
    times. torchrun's own --max-restarts would retry a reported error (a full disk) too, could not say which rank
    died, and its restarted ranks hang in init_process_group on the store it shares with them (torch 2.13, gloo;
    pytorch#135712): so the agent runs once per attempt, on a store of its own, and this loop decides."""
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    logging.disable(logging.CRITICAL)  # torchrun's notes and error report: this process says what it has to with print
    os.environ[LAUNCHER_PID] = str(os.getpid())
    restarts = 0
    try:
        while True:
            command = [*argv, "--resume"] if restarts else argv
            try:
                torchrun.run(torchrun.get_args_parser().parse_args(["--standalone", f"--nproc-per-node={ranks}", "-m",
                                                                     "training", *command]))  # fmt: skip
                return 0
            except ChildFailedError as failed:
                death = _unreported_death(failed.failures)
                reported = any(failure.exitcode == REPORTED for failure in failed.failures.values())  # would only recur
                if death is None or reported or restarts == max_restarts:
                    if death:
                        spent = f"; no restarts left (--max-restarts {max_restarts})" if max_restarts and not reported else ""
                        print(f"train: {death}{spent}", file=sys.stderr)
                    return 1
                restarts += 1
                print(f"train: {death} at step ~{_last_logged_step(out) + 1}; restart {restarts} of {max_restarts} from "
                      f"{_restart_point(out)}", file=sys.stderr)  # fmt: skip
    except (SignalException, KeyboardInterrupt) as stop:
        return _stopped(getattr(stop, "sigval", signal.SIGINT))


def _stopped(number: int) -> int:
    print(f"train: stopped by {signal.Signals(number).name}; every rank has ended: continue with --resume", file=sys.stderr)
    return 128 + number


class _Terminated(Exception):
    """SIGTERM in a rank that runs in `train`'s own process."""


def _raise_terminated(number, frame) -> None:
    raise _Terminated


def run_here(train: Callable[[], None]) -> int:
    """One rank in `train`'s own process, for one rank without --max-restarts: no agent and no second interpreter
    importing torch (seconds a run, which a ladder or a decision of many small runs pays many times), and whatever
    stops `train` stops the rank, being the same process. Ctrl-C and SIGTERM end it as `launch` does."""
    import socket

    with socket.socket() as probe:  # the one-rank group's store: a free port, as torchrun's --standalone picks
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))  # fmt: skip
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return 1 if run_rank(train) == REPORTED else 0  # as `launch` ends when a rank reported its error
    except KeyboardInterrupt:
        return _stopped(signal.SIGINT)
    except _Terminated:
        return _stopped(signal.SIGTERM)


def _unreported_death(failures: dict) -> str | None:
    """'rank R was killed by SIGNAL' (or 'failed (exit code N)') for the first rank that ended without its own error
    line; None when every failed rank printed one or was only stopped (SIGTERM)."""
    unreported = {rank: failure.exitcode for rank, failure in failures.items()
                  if failure.exitcode not in (REPORTED, -signal.SIGTERM)}  # fmt: skip
    if not unreported:
        return None
    rank, code = min(unreported.items(), key=lambda item: (item[1] >= 0, item[0]))  # a killed rank before its peers' errors
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"failed (exit code {code}): its error is above"
    return f"rank {rank} {how}"


def _last_logged_step(out: Path) -> int:
    """The step of the last line of OUT/metrics.jsonl (0 before any): the ranks died in the step after it, or a few
    later when steps are logged every few."""
    from training.metrics import METRICS_FILE

    try:
        lines = (out / METRICS_FILE).read_text().splitlines()
        return json.loads(lines[-1])["step"] if lines else 0
    except (OSError, ValueError, KeyError):
        return 0


def _restart_point(out: Path) -> str:
    from training import checkpoint

    latest = checkpoint.latest(out / "checkpoints")
    return latest.name if latest else "step 0"


def tie_to_launcher() -> None:
    """In a rank: die with the parent that started it (the torchrun agent), even by SIGKILL, and end quietly on the
    SIGINT the agent forwards on Ctrl-C."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        launcher = os.environ.get(LAUNCHER_PID)
        if launcher and os.getppid() != int(launcher):  # the launcher died before the line above
            os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _free(path: str) -> str:
    """Free space on the filesystem of `path` (or of its nearest existing folder)."""
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    return f"{free / 2**20:.1f} MiB" if free >= 2**20 else f"{free / 2**10:.0f} KiB"


def error_line(error: OSError) -> str:
    """One line for an OSError in a rank: a full disk says so, with the path and the free space left."""
    from training.checkpoint import CheckpointError

    what = "checkpoint " if isinstance(error, CheckpointError) else ""
    if error.errno == errno.ENOSPC:
        removed = " (removed)" if what else ""
        return (f"disk full writing {what}{error.filename}{removed}: {_free(error.filename)} free there; free space, then "
                "continue with --resume")
    return f"cannot write {what}{error.filename}: {error.strerror}"


def run_rank(train: Callable[[], None]) -> int:
    """Run this rank's training; an OSError (a full disk, a file it cannot write) ends it with one line instead of a
    traceback, printed by rank 0 alone for a checkpoint's (every rank raises it). Returns the exit code."""
    from training.checkpoint import CheckpointError

    try:
        train()
    except OSError as error:
        if error.filename is None:  # not a file this rank writes: the traceback says more
            raise
        if os.environ.get("RANK", "0") == "0" or not isinstance(error, CheckpointError):
            print(f"train: {error_line(error)}", file=sys.stderr)
        return REPORTED
    except RuntimeError:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            time.sleep(PEER_GRACE_S)  # see PEER_GRACE_S: a rank that outlives it has an error of its own
        raise
    return 0
