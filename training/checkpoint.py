"""Checkpoints with torch.distributed.checkpoint: sharded model + optimizer, plus the train state as JSON.

A checkpoint is written to `step-N.tmp/` and renamed to `step-N/` by rank 0 once every rank has written and the
train state is on disk; a killed save leaves only a `.tmp` folder, which is never loaded and is removed by the next
save. Last before the rename rank 0 writes `complete.json`, every file of the checkpoint with its bytes, so a
checkpoint damaged after its save (a file deleted, truncated or half-copied) is found by a stat of each file before
anything loads it, and a resume skips it for the newest complete one. Sizes, not hashes: hashing a 7B checkpoint
(~100 GiB) would add minutes to every save and every resume. A folder without the marker, written before it existed,
counts as complete as it did then, with its train state (and DCP's `.metadata` index). A save that fails (a full
disk) removes its `.tmp` folder and raises CheckpointError on every rank. DCP reshards on load, so a checkpoint taken
on 2 ranks loads on 1 (or 8).

torch.distributed.checkpoint (and the DTensor code it pulls in) is imported where a checkpoint is saved or loaded,
not here: `train`'s launcher only looks for the latest checkpoint, and that import would cost every launch most of
a second.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from torch.distributed.checkpoint.api import CheckpointException

STATE_FILE = "train_state.json"
MARKER = "complete.json"
_DCP_INDEX = ".metadata"
_STEP_DIR = re.compile(r"step-(\d+)")


def rng_state() -> dict:
    state = {"cpu": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode("ascii")}
    if torch.cuda.is_available():
        state["cuda"] = base64.b64encode(torch.cuda.get_rng_state().numpy().tobytes()).decode("ascii")
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(torch.frombuffer(bytearray(base64.b64decode(state["cpu"])), dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(torch.frombuffer(bytearray(base64.b64decode(state["cuda"])), dtype=torch.uint8))


def incomplete(path: Path) -> str | None:
    """Why the checkpoint folder `path` cannot be loaded (a file its marker lists missing or of another size), or None."""
    try:
        files = json.loads((path / MARKER).read_text())["files"]
    except FileNotFoundError:
        missing = [name for name in (STATE_FILE, _DCP_INDEX) if not (path / name).is_file()]
        return f"no {MARKER}, and no {' or '.join(missing)}" if missing else None
    except (OSError, ValueError, KeyError, TypeError):
        return f"its {MARKER} is unreadable"
    for name, size in files.items():
        try:
            found = (path / name).stat().st_size
        except FileNotFoundError:
            return f"{name} is missing"
        if found != size:
            return f"{name} has {found:,} bytes, {MARKER} records {size:,}"
    return None


def step_of(path: Path) -> int:
    """The step a checkpoint folder `step-N` was taken after."""
    return int(path.name[5:])


def latest(folder: str | Path, skipped: list[tuple[Path, str]] | None = None) -> Path | None:
    """The newest complete checkpoint, if any; each newer one that is not complete goes into `skipped` with why."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    steps = sorted((p for p in folder.iterdir() if _STEP_DIR.fullmatch(p.name)), key=step_of, reverse=True)
    for step in steps:
        why = incomplete(step)
        if why is None:
            return step
        if skipped is not None:
            skipped.append((step, why))
    return None


class CheckpointError(OSError):
    """A checkpoint could not be written (errno and strerror of the cause, filename the `.tmp` folder, now removed);
    raised on every rank when DCP's write failed, on rank 0 alone when its train state did."""


def _local_bytes(state) -> int:
    """Bytes of this rank's shards in a (nested) state dict."""
    if isinstance(state, dict):
        return sum(_local_bytes(value) for value in state.values())
    if isinstance(state, (list, tuple)):
        return sum(_local_bytes(value) for value in state)
    if isinstance(state, torch.Tensor):
        local = state.to_local() if hasattr(state, "to_local") else state
        return local.numel() * local.element_size()
    return 0


def _write_failure(failure: CheckpointException, folder: Path, state: dict) -> OSError | None:
    """The OSError behind DCP's gathered failures, the same on every rank: the first any rank raised, or ENOSPC when
    the disk has less room than this rank's shards (torch's zip writer reports a short write as a RuntimeError)."""
    errors = [error for error, _ in failure.failures.values() if isinstance(error, OSError)]
    full = not errors and shutil.disk_usage(folder).free < _local_bytes(state)
    verdicts = [None] * dist.get_world_size()
    dist.all_gather_object(verdicts, full)  # before rank 0 frees the space
    if errors:
        return errors[0]
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) if any(verdicts) else None


def save(folder: str | Path, step: int, model, optimizer, train_state: dict, keep: int, extra: dict | None = None) -> Path:
    """Write step `step`'s checkpoint; `extra` (tensors by name, e.g. a weight average) is saved beside the model."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_state_dict

    folder = Path(folder)
    final, tmp = folder / f"step-{step:08d}", folder / f"step-{step:08d}.tmp"
    rank = dist.get_rank()
    if rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.tmp"):
            shutil.rmtree(stale)
    dist.barrier()
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state} | ({"extra": extra} if extra else {})
    try:
        dcp.save(state, checkpoint_id=str(tmp))
        rngs = [None] * dist.get_world_size()
        dist.all_gather_object(rngs, rng_state())  # every rank's own generators, not rank 0's for all
        if rank == 0:
            _write_json(tmp / STATE_FILE, {**train_state, "step": step, "rng": rngs})
            files = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
            _write_json(tmp / MARKER, {"step": step, "files": files})  # last: every rank's files are written
    except (OSError, CheckpointException) as failure:  # DCP raises its gathered failures on every rank
        cause = failure if isinstance(failure, OSError) else _write_failure(failure, folder, state)
        if cause is None:
            raise
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(cause.errno, cause.strerror, str(tmp)) from None
    if rank == 0:
        if final.exists():  # an incomplete one the resume skipped: a run resumes from its newest complete checkpoint
            shutil.rmtree(final)
        os.rename(tmp, final)
        steps = sorted((p for p in folder.iterdir() if _STEP_DIR.fullmatch(p.name)), key=lambda p: p.name)
        for old in steps[:-keep]:
            shutil.rmtree(old)
    dist.barrier()
    return final


def _write_json(path: Path, data: dict) -> None:
    with open(path, "w") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())


def load(path: str | Path, model, optimizer, extra: dict | None = None) -> dict:
    """Load model, optimizer and the `extra` tensors saved beside them in place (resharding as needed) and return the
    train state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state} | ({"extra": extra} if extra else {})
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    with open(Path(path) / STATE_FILE) as handle:
        train_state = json.load(handle)
    rngs = train_state["rng"] if isinstance(train_state["rng"], list) else [train_state["rng"]]
    set_rng_state(rngs[dist.get_rank() % len(rngs)])  # on another rank count, rank r takes saved rank r mod n
    return train_state
