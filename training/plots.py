"""Figures of a training run from its metrics (`training.metrics.load`), for the notebook and `curate report`."""

import pandas as pd
from matplotlib.figure import Figure

from training import metrics


def _columns(frame, prefix: str) -> list[str]:
    return [c for c in frame.columns if c.startswith(prefix)]


def _total_and_per_source(frame, total: str, per_source: str, title: str, marker: str | None = None):
    """The `total` column in black and each `per_source.<name>` column beside it, over the steps."""
    figure = Figure(figsize=(9, 4))
    axis = figure.subplots()
    axis.plot(frame.step, frame[total], label="total", color="black", marker=marker)
    for column in _columns(frame, per_source + "."):
        axis.plot(frame.step, frame[column], label=column.removeprefix(per_source + "."), marker=marker and ".", alpha=0.7)
    axis.set_title(title)
    axis.set_xlabel("step")
    axis.legend()
    figure.tight_layout()
    return figure


def loss_figure(run: str):
    return _total_and_per_source(metrics.load(run), "loss", "loss_per_source", "loss")


def validation_figure(run: str):
    """Held-out loss, total and per source (a source that selects a bucket is scored on its bucket): what mixtures
    and filters are compared by. None when the run never validated."""
    frame = metrics.load(run)
    if "val_loss" not in frame.columns:
        return None
    validated = frame[frame.val_loss.notna()]
    return _total_and_per_source(validated, "val_loss", "val_loss_per_source", "validation loss (held-out documents)", marker="o")


def tokens_figure(run: str):
    """Each source's share of the tokens seen so far, against its target weight (which changes with the phase)."""
    frame = metrics.load(run)
    figure = Figure(figsize=(9, 4))
    axis = figure.subplots()
    for column in _columns(frame, "token_share."):
        name = column.removeprefix("token_share.")
        line = axis.plot(frame.step, frame[column], label=f"{name} seen")[0]
        if f"target_weight.{name}" in frame.columns:
            axis.plot(frame.step, frame[f"target_weight.{name}"], linestyle="--", color=line.get_color(), label=f"{name} target")
    axis.set_title("token share per source vs target weight")
    axis.set_xlabel("step")
    axis.legend()
    figure.tight_layout()
    return figure


def _series_figure(run: str, column: str, title: str):
    frame = metrics.load(run)
    values = frame[column] if column in frame.columns else None
    if values is None or not pd.api.types.is_numeric_dtype(values):  # MFU is "unknown" where the device's peak is
        return None
    figure = Figure(figsize=(9, 3))
    axis = figure.subplots()
    axis.plot(frame.step, values)
    axis.set_title(title)
    axis.set_xlabel("step")
    figure.tight_layout()
    return figure


def lr_figure(run: str):
    return _series_figure(run, "lr", "learning rate")


def grad_norm_figure(run: str):
    return _series_figure(run, "grad_norm", "gradient norm (before clipping)")


def throughput_figure(run: str):
    return _series_figure(run, "tokens_per_s", "tokens/s")


def mfu_figure(run: str):
    return _series_figure(run, "mfu", "model FLOPs utilization")


SECTIONS = [
    ("Loss", loss_figure, None),
    ("Validation loss", validation_figure, None),
    ("Tokens per source", tokens_figure, None),
    ("Learning rate", lr_figure, None),
    ("Gradient norm", grad_norm_figure, None),
    ("Throughput", throughput_figure, None),
    ("MFU", mfu_figure, None),
]
