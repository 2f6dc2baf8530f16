"""Run statistics: per stage and shard docs/bytes in and out, drops by reason, seconds.

`stats.json` is derived from the manifest after every run; `load(OUT)` gives it to notebooks as a DataFrame.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import TYPE_CHECKING

import fsspec

from curation.io import read_json, write_json_atomic
from shard_contract import TOKENIZER_FILE

if TYPE_CHECKING:  # the runner writes stats without pandas, whose import costs the driver 0.2 s
    import pandas as pd

STATS = "stats.json"
SUMMED = ("docs_in", "docs_out", "bytes_in", "bytes_out", "seconds")
DROP_SAMPLES = 5  # dropped input files named per reason, in a read shard's stats and its stage's (all: --keep-removed)


def drop_samples(dropped: Iterable[dict]) -> list[dict]:
    """The first DROP_SAMPLES of each reason among dropped files ({path, reason, bytes}), in order."""
    samples, per_reason = [], {}
    for sample in dropped:
        per_reason[sample["reason"]] = per_reason.get(sample["reason"], 0) + 1
        if per_reason[sample["reason"]] <= DROP_SAMPLES:
            samples.append(sample)
    return samples


def summarize_pass(passes: dict) -> dict:
    """Per step of a duplicate stage's pass: tasks, seconds and every counter summed over its tasks (RSS: the
    largest task's)."""
    summary = {}
    for step, tasks in passes.items():
        totals: dict = {"tasks": len(tasks)}
        for stats in tasks.values():
            for key, value in stats.items():
                if key == "node":  # the Ray node that ran the task: tasks per node
                    nodes = totals.setdefault("nodes", {})
                    nodes[value] = nodes.get(value, 0) + 1
                elif isinstance(value, dict):
                    merged = totals.setdefault(key, {})
                    for name, count in value.items():
                        merged[name] = merged.get(name, 0) + count
                elif key.startswith("rss_"):  # a worker's memory: the largest task's, not a sum
                    totals[key] = max(totals.get(key, 0), value)
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    totals[key] = round(totals.get(key, 0) + value, 4)
        summary[step] = totals
    return summary


def write(fs, root: str, manifest: dict, stage_dirs: list[str]) -> None:
    stages = []
    for stage_dir in stage_dirs:
        entry = manifest["stages"].get(stage_dir, {})
        shards = entry.get("shards", {})
        stages.append({"stage": stage_dir, "shards": [shards[key] for key in sorted(shards, key=int)]})
        samples = drop_samples(sample for shard in stages[-1]["shards"] for sample in shard.get("drop_samples", []))
        if samples:  # the read stage's dropped files, merged over its shards
            stages[-1]["drop_samples"] = samples
        if "passes" in entry or "pass_stats" in entry:
            stages[-1]["pass"] = entry.get("pass_stats") or summarize_pass(entry["passes"])
    write_json_atomic(fs, f"{root}/{STATS}", {"recipe": manifest.get("recipe", {}).get("name"), "stages": stages})


def _run_stats(output: str) -> dict:
    """A run's stats.json; a folder that is no run is one line naming the folder to give instead."""
    fs, root = fsspec.core.url_to_fs(output)
    path = f"{root.rstrip('/')}/{STATS}"
    content = read_json(fs, path) if fs.exists(path) else {}
    if "stages" in content:
        return content
    if "shards" in content or fs.exists(f"{root.rstrip('/')}/{TOKENIZER_FILE}"):  # RUN/tokens has a stats.json too
        run = posixpath.dirname(output.rstrip("/")) or "."
        raise FileNotFoundError(f"{output} is a token folder (written by `curate tokenize`), not a run folder: name its "
                                f"run, {run}")  # fmt: skip
    raise FileNotFoundError(f"no {STATS} in {output}: is it the output folder of `curate run`?")


def _rows(output: str) -> list[dict]:
    """stats.json as one flat dict per (stage, shard), the rows of load()."""
    rows = []
    for stage in _run_stats(output)["stages"]:
        for shard in stage["shards"]:
            row = {"stage": stage["stage"]}
            for key, value in shard.items():
                if isinstance(value, dict):  # drop reasons and stage counters (e.g. pii_spans per entity)
                    prefix = "dropped_" if key == "dropped" else f"{key}."
                    row.update({f"{prefix}{name}": count for name, count in value.items()})
                elif not isinstance(value, list):  # samples (e.g. pii_samples) stay in stats.json only
                    row[key] = value
            rows.append(row)
    return rows


def _summed(column: str) -> bool:
    return column in SUMMED or column.startswith("dropped_") or "." in column


def load(output: str) -> pd.DataFrame:
    """One row per (stage, shard): docs_in, docs_out, bytes_in, bytes_out, seconds and one `dropped_<reason>` column per reason."""
    import pandas as pd

    rows = _rows(output)
    frame = pd.DataFrame(rows, columns=None if rows else ["stage", "shard", *SUMMED])
    counters = [c for c in frame.columns if c.startswith("dropped_") or "." in c]
    frame[counters] = frame[counters].fillna(0).astype("int64")
    return frame


def stage_totals(output: str) -> dict[str, dict]:
    """funnel(load(output)) without pandas, whose import and frame took `curate run` 0.4 s to print its last table:
    per stage, in run order, its shards and the sums of its numeric columns."""
    totals: dict[str, dict] = {}
    for row in _rows(output):
        stage = totals.setdefault(row["stage"], {"shards": 0} | dict.fromkeys(SUMMED, 0))
        stage["shards"] += 1
        for column, value in row.items():
            if _summed(column):
                stage[column] = stage.get(column, 0) + value
    return dict(sorted(totals.items()))


def load_passes(output: str) -> dict[str, dict]:
    """Per duplicate stage, its corpus-wide pass: per step the tasks, seconds and summed counters."""
    return {stage["stage"]: stage["pass"] for stage in _run_stats(output)["stages"] if "pass" in stage}


def print_passes(passes: dict[str, dict], console=None) -> None:
    """One row per step of each duplicate stage's pass, with its counters."""
    from rich.console import Console
    from rich.table import Table

    if not passes:
        return
    table = Table(title="Dedup passes")
    for column in ("stage / step", "tasks", "seconds", "counters"):
        table.add_column(column, justify="right" if column in ("tasks", "seconds") else "left")
    for stage, steps in passes.items():
        table.add_row(f"[bold]{stage}[/]", "", "", "")
        first = {"keys": "0", "buckets": "1", "verify-first": "2", "verify-second": "3", "assign": "9"}
        for step, totals in sorted(steps.items(), key=lambda item: first.get(item[0], "5" + item[0])):
            counters = ", ".join(
                f"{key} {value:,}" if not isinstance(value, dict) else f"{key} {len(value)}" if key == "nodes" else f"{key} {value}"
                for key, value in totals.items() if key not in ("tasks", "seconds")
            )  # fmt: skip
            table.add_row(f"  {step}", str(totals["tasks"]), f"{totals.get('seconds', 0):.2f}", counters)
    console = console or Console()
    console.print(table)


def funnel(frame: pd.DataFrame) -> pd.DataFrame:
    """Per stage totals in run order."""
    numeric = [c for c in frame.columns if _summed(c)]
    totals = frame.groupby("stage", sort=True)[numeric].sum()
    totals.insert(0, "shards", frame.groupby("stage", sort=True).size())
    return totals


def print_funnel(totals: dict[str, dict], console=None) -> None:
    """Stage rows (stage_totals), each followed by its drop reasons, most frequent first."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title="Curation funnel")
    table.add_column("stage / drop reason", max_width=60, overflow="fold")  # a long counter (an SPDX expression) folds
    for column in ("shards", "docs in", "docs out", "kept", "MB in", "MB out", "seconds"):
        table.add_column(column, justify="right", no_wrap=True)
    for stage, row in totals.items():
        kept = f"{row['docs_out'] / row['docs_in']:.1%}" if row["docs_in"] else "-"
        table.add_row(
            f"[bold]{stage}[/]", str(row["shards"]), f"{int(row['docs_in']):,}", f"{int(row['docs_out']):,}", kept,
            f"{row['bytes_in'] / 1e6:.2f}", f"{row['bytes_out'] / 1e6:.2f}", f"{row['seconds']:.1f}",
        )  # fmt: skip
        reasons = {c.removeprefix("dropped_"): int(v) for c, v in row.items() if c.startswith("dropped_") and v}
        for reason, count in sorted(reasons.items(), key=lambda item: -item[1]):
            table.add_row(f"  - {reason}", "", f"{count:,}", "", "", "", "", "", style="dim")
        for column in sorted(c for c, v in row.items() if "." in c and v):
            table.add_row(f"  ~ {column}", "", "", f"{int(row[column]):,}", "", "", "", "", style="dim")
    console.print(table)
