"""One writer per output folder, the convention `curate run` (OUT/run.lock) and `train` (OUT/train.lock) both keep:
the lock holds its owner's pid, start time and host while the command runs, so a second command into the same folder
is refused in one line instead of writing beside the first. A lock whose process is gone from this host (or is a
zombie: ended, not yet reaped) is stale and taken over; a killed command leaves one of those.

A local folder's lock is written whole under a temporary name and hard-linked into place (a link fails on an existing
name), so two commands starting at once cannot both take it and none reads it half-written. A dead owner's lock is
deleted under an flock of that lock file, by a taker that checks, holding it, that the name still holds the file it
judged dead: two takers never both delete (the second would delete the first one's new lock), and the kernel drops
the flock of a taker killed meanwhile. An object store (s3://, gs://) has no create-if-absent through fsspec: there
the lock is checked, then written, which refuses a second command started after the first took it, not one started
in the same instant."""

import contextlib
import fcntl
import json
import os
import socket
import uuid

import fsspec
import psutil
from fsspec.implementations.local import LocalFileSystem


class FolderLocked(Exception):
    """Another live command writes into this folder."""


def _owner(program: str) -> dict:
    me = psutil.Process()
    return {"pid": me.pid, "started": me.create_time(), "host": socket.gethostname(), "program": program}


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


def _read(fs, path: str) -> dict:
    try:
        return _owner_in(fs.cat_file(path))
    except OSError:
        return {}


def _owner_in(text: str | bytes) -> dict:
    try:
        owner = json.loads(text)
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


def _create(fs, path: str, text: str) -> bool:
    """Write the lock unless it exists; False when it does."""
    if isinstance(fs, LocalFileSystem):
        whole = f"{path}.tmp-{uuid.uuid4().hex}"  # a killed taker's is removed with `curate run`'s temporaries
        with open(whole, "w") as file:
            file.write(text)
        try:
            os.link(whole, path)
        except (FileExistsError, FileNotFoundError):  # taken; or taken by a run whose cleanup removed this temporary
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(whole)
        return True
    if fs.exists(path):
        return False
    fs.pipe_file(path, text.encode())
    return True


def _remove_dead(fs, path: str) -> None:
    """Delete the lock if its owner is dead; locally only while this taker holds the flock of the file it reads, and
    only if `path` still names that file (the open file keeps its inode number from being reused)."""
    if not isinstance(fs, LocalFileSystem):
        fs.rm_file(path)
        return
    try:
        with open(path, "r+") as file:  # writable: NFS emulates flock with a write lock
            fcntl.flock(file, fcntl.LOCK_EX)
            if os.stat(path).st_ino == os.fstat(file.fileno()).st_ino and not _alive(_owner_in(file.read())):
                os.unlink(path)
    except FileNotFoundError:
        pass


def check(folder: str, lock_file: str, program: str) -> None:
    """Raise FolderLocked when a live command holds `folder`'s lock: asked before a slow start (Ray's), so the refusal
    comes at once; `acquire` still decides."""
    fs, root = fsspec.core.url_to_fs(folder, use_listings_cache=False)
    path = f"{root.rstrip('/')}/{lock_file}"
    if fs.exists(path) and _alive(owner := _read(fs, path)):
        raise _locked(folder, lock_file, owner, program)


def _locked(folder: str, lock_file: str, owner: dict, program: str) -> FolderLocked:
    return FolderLocked(f"{folder} is in use by {owner.get('program', program)} (pid {owner['pid']} on {owner['host']}): "
                        f"wait for it to finish or stop it; if it is gone, delete {folder.rstrip('/')}/{lock_file}")  # fmt: skip


def acquire(folder: str, lock_file: str, program: str) -> str:
    """Create `folder` and take its lock; the lock's path. Raises FolderLocked naming the live owner (this process
    too: one command writes a folder once at a time); OSError when `folder` cannot be written."""
    fs, root = fsspec.core.url_to_fs(folder, use_listings_cache=False)
    fs.makedirs(root, exist_ok=True)
    path = f"{root.rstrip('/')}/{lock_file}"
    for _ in range(2):
        if _create(fs, path, json.dumps(_owner(program))):
            return path
        owner = _read(fs, path)
        if _alive(owner):
            raise _locked(folder, lock_file, owner, program)
        _remove_dead(fs, path)  # stale: its command was killed
    raise FolderLocked(f"{folder.rstrip('/')}/{lock_file} is being taken by another {program} at the same time")


def release(folder: str, path: str | None) -> None:
    """Remove the lock if this process took it (`path` from acquire) and still owns it."""
    if path is None:
        return
    fs, _ = fsspec.core.url_to_fs(folder, use_listings_cache=False)
    try:
        owner = _read(fs, path)
        if owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
            fs.rm_file(path)
    except OSError:
        pass
