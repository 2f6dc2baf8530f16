"""One writer per run folder: `train` holds `OUT/train.lock` (its pid, start time and host) while it runs, so a second
`train` (a `--resume` typed while the first still trains) is refused instead of writing checkpoints beside it. A lock
whose process is gone from this host (or is a zombie: ended, not yet reaped) is stale and taken over; a killed launcher
leaves one of those."""

import json
import os
import socket
from pathlib import Path

import psutil

LOCK_FILE = "train.lock"


class RunLocked(Exception):
    """Another live `train` writes into this folder."""


def _owner() -> dict:
    me = psutil.Process()
    return {"pid": me.pid, "started": me.create_time(), "host": socket.gethostname()}


def _alive(owner: dict) -> bool:
    """The lock's process still runs (on another host it cannot be checked, so it counts as running); a lock that
    cannot be read is stale."""
    if "pid" not in owner:
        return False
    if owner.get("host") != socket.gethostname():
        return True
    try:
        process = psutil.Process(owner["pid"])
        # a zombie has ended: a killed rank stays one until something reaps it, which a container's init may never do
        return abs(process.create_time() - owner["started"]) < 1 and process.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, KeyError, TypeError, ValueError):
        return False


def acquire(out: Path) -> Path:
    """Create `out` and its lock, or raise RunLocked naming the owner (OSError when `out` cannot be written)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    for _ in range(2):
        try:
            handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                owner = json.loads(path.read_text())
            except (OSError, ValueError):
                owner = {}
            if _alive(owner):
                raise RunLocked(f"{out} is in use by train (pid {owner['pid']} on {owner['host']}): wait for it to finish "
                                f"or stop it; if it is gone, delete {path}") from None  # fmt: skip
            path.unlink(missing_ok=True)  # stale: its launcher was killed
            continue
        with os.fdopen(handle, "w") as file:
            json.dump(_owner(), file)
        return path
    raise RunLocked(f"{path} is being taken by another train at the same time")


def release(path: Path | None) -> None:
    """Remove the lock if this process took it and still owns it."""
    if path is None:
        return
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass
