"""Training metrics: JSONL on rank 0 (and TensorBoard when installed), MFU, loss-spike detection, `load()`."""

from __future__ import annotations

import json
import math
import os
import resource
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # pandas only to load metrics: a GPU image may lack it
    import pandas as pd

METRICS_FILE = "metrics.jsonl"
EVENTS_FILE = "events.jsonl"
LINEAGE_FILE = "lineage.jsonl"
SPIKE_POLICIES = ("log", "skip", "rewind")  # what a step does about a spike (see trainer.spike_action)
# dense BF16 tensor-core peak per device, FLOP/s
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "B200": 2250e12, "L40S": 362e12}


def peak_flops(device: torch.device) -> tuple[str, float | None]:
    """(device name, peak FLOP/s) or (name, None) when the table does not know it."""
    if device.type != "cuda":
        return "cpu", None
    name = torch.cuda.get_device_name(device)
    for key, flops in PEAK_BF16_FLOPS.items():
        if key in name.upper():
            return name, flops
    return name, None


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


class SpikeDetector:
    """A loss that is NaN/inf, or more than `sigma` std above the mean of the last `window` ordinary losses. A spike
    stays out of the window, so the next one is measured against the same level, unless `patience` come in a row:
    then the level itself has moved (a new phase, a longer context) and the window starts again from there."""

    def __init__(self, sigma: float, window: int = 50, warmup: int = 10, patience: int = 3):
        self.sigma, self.warmup, self.patience = sigma, warmup, patience
        self.recent: deque[float] = deque(maxlen=window)
        self.in_a_row = 0

    def threshold(self) -> float:
        """The loss above which a step is a spike (infinite until `warmup` losses are in)."""
        if len(self.recent) < self.warmup:
            return math.inf
        mean = sum(self.recent) / len(self.recent)
        std = (sum((x - mean) ** 2 for x in self.recent) / len(self.recent)) ** 0.5
        return mean + self.sigma * max(std, 1e-8)

    def __call__(self, loss: float) -> str | None:
        if not math.isfinite(loss):
            return "nan"
        if loss > self.threshold():
            self.in_a_row += 1
            if self.in_a_row < self.patience:
                return "spike"
            self.recent.clear()
        self.in_a_row = 0
        self.recent.append(loss)
        return None


def keep_through(out: Path, step: int) -> None:
    """Drop every record past `step` from the run's step logs (metrics, events, lineage), each rewritten atomically: a
    run resumed from its step-S checkpoint (S = 0: a fresh start) logs S+1 on, and a killed run's later steps, or an
    older run's, would otherwise stay beside its own in the notebooks and the report. A line a kill cut goes too."""
    for name in (METRICS_FILE, EVENTS_FILE, LINEAGE_FILE):
        path, tmp = out / name, out / f"{name}.tmp"
        if not path.is_file():
            continue
        with open(path) as lines, open(tmp, "w") as kept:
            for line in lines:
                try:
                    keep = json.loads(line)["step"] <= step
                except (ValueError, KeyError, TypeError):
                    keep = False
                if keep:
                    kept.write(line if line.endswith("\n") else line + "\n")
        os.replace(tmp, path)


class MetricsWriter:
    """Appends one JSON object per logged step; rank 0 only."""

    def __init__(self, out: Path):
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.tensorboard = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(str(out / "tensorboard"))
        except ImportError:
            pass

    def log(self, record: dict) -> None:
        with open(self.out / METRICS_FILE, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.tensorboard:
            for key, value in record.items():
                if isinstance(value, dict):
                    for sub, number in value.items():
                        if isinstance(number, (int, float)):
                            self.tensorboard.add_scalar(f"{key}/{sub}", number, record["step"])
                elif isinstance(value, (int, float)) and key != "step":
                    self.tensorboard.add_scalar(key, value, record["step"])

    def event(self, record: dict) -> None:
        with open(self.out / EVENTS_FILE, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def close(self) -> None:
        if self.tensorboard:
            self.tensorboard.close()


class ProgressLine:
    """Rank 0's live line: a bar over the steps with loss, tokens/s and MFU; log lines print above it."""

    def __init__(self, total: int, done: int):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("train"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]:.4f}  {task.fields[tps]:,.0f} tok/s  MFU {task.fields[mfu]}"),
            TimeRemainingColumn(),
        )  # fmt: skip
        self.task = self.progress.add_task("train", total=total, completed=done, loss=float("nan"), tps=0.0, mfu="-")
        self.progress.start()

    def update(self, step: int, loss: float, tokens_per_s: float, mfu: str) -> None:
        self.progress.update(self.task, completed=step, loss=loss, tps=tokens_per_s, mfu=mfu)

    def print(self, line: str) -> None:
        """One line however narrow the console (a log file's is 80 columns): a log line is never wrapped."""
        self.progress.console.print(line, highlight=False, soft_wrap=True)

    def close(self) -> None:
        self.progress.stop()


def load(run_dir: str) -> pd.DataFrame:
    """One row per logged step; dict-valued metrics become `name.key` columns (e.g. `loss_per_source.web`)."""
    import pandas as pd

    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {METRICS_FILE} in {run_dir}: is it the --out folder of `train`?")
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    # a rewind to a checkpoint (--spike-policy rewind) logs its steps again: the last record of a step is the one that counts
    return pd.json_normalize(records).drop_duplicates("step", keep="last").reset_index(drop=True)
