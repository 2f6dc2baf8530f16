"""One writer per training folder: `train` holds `OUT/train.lock` while it runs, so a second `train` (a `--resume`
typed while the first still trains) is refused instead of writing checkpoints beside it; a killed launcher's lock is
taken over. The convention is `curate run`'s too (shard_contract.folder_lock)."""

from pathlib import Path

from shard_contract import folder_lock

LOCK_FILE = "train.lock"
RunLocked = folder_lock.FolderLocked


def acquire(out: Path) -> Path:
    """Create `out` and its lock, or raise RunLocked naming the owner (OSError when `out` cannot be written)."""
    return Path(folder_lock.acquire(str(out), LOCK_FILE, "train"))


def release(path: Path | None) -> None:
    """Remove the lock if this process took it and still owns it."""
    if path is not None:
        folder_lock.release(str(path.parent), str(path))
