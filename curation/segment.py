"""One fused task: the consecutive per-shard stages between two barriers, on one shard, in memory.

Plain Python that Ray schedules (curation/runner.py). The table passes from stage to stage without touching storage;
only the stages in `writes` leave a part (the last one before a dedup stage and the final one, or every stage with
--materialize-all). Each stage still returns its own stats, drop reasons and removed documents.
"""

import time
from dataclasses import dataclass

import pyarrow as pa

from curation import dedup
from curation.io import read_parquet, write_parquet_atomic
from curation.recipe import Recipe
from curation.run_folder import RunFolder
from curation.schema import text_bytes
from curation.sources.readers import read_input
from curation.worker_stages import worker_stage


@dataclass
class SegmentTask:
    """Stages `first`..`last` of one shard, reading `input` (the input file when `first` is 0, else the part of stage
    `first - 1`) and writing the parts of the stages in `writes`."""

    recipe: Recipe
    first: int  # 0 reads the input file; k > 0 runs recipe.stages[k-1]
    last: int
    shard: int
    input: str
    folder: RunFolder
    writes: frozenset[int]
    keep_removed: bool
    snapshot: str
    hashes: list[str]  # chained config hash per stage index
    clusters: dedup.PassContext | None = None  # `first` is a duplicate stage: where its pass left the clusters


class StageFailed(RuntimeError):
    """A stage of a fused task failed; carries the stage so the failure is reported where it happened."""

    def __init__(self, stage_dir: str, message: str):
        super().__init__(stage_dir, message)
        self.stage_dir = stage_dir

    def __str__(self) -> str:
        return self.args[1]


def run_segment(task: SegmentTask) -> list[dict]:
    """The segment's stages on one shard; returns each stage's stats. Raises StageFailed naming the stage and file."""
    table, results = None, []
    for index in range(task.first, task.last + 1):
        started = time.perf_counter()
        try:
            if index == 0:
                kept, stats = _read(task)
            else:
                if table is None:
                    table = read_parquet(task.folder.fs, task.input)
                    if task.clusters is not None:
                        table = dedup.attach_clusters(task.clusters, task.shard, table)
                kept, stats = _run_stage(task, index, table)
            if index in task.writes:
                _write(task.folder, task.folder.part(index, task.shard), kept)
        except Exception as error:
            stage_dir = task.folder.stage_dirs[index]
            raise StageFailed(stage_dir, f"shard {task.shard} of {stage_dir} failed on {task.input}: {error!r}") from error
        table = kept
        stats.update(docs_out=kept.num_rows, bytes_out=text_bytes(kept), seconds=round(time.perf_counter() - started, 4))
        results.append(stats)
    return results


def _read(task: SegmentTask) -> tuple[pa.Table, dict]:
    """Stage 0: the input file as documents."""
    result = read_input(task.recipe.source, task.snapshot, task.input)
    stats = {
        "shard": task.shard, "docs_in": result.table.num_rows + sum(result.dropped.values()), "bytes_in": result.bytes_in,
        "dropped": dict(result.dropped), "input": task.input, "input_sha256": result.sha256,
    }  # fmt: skip
    return result.table, stats


def _run_stage(task: SegmentTask, index: int, table: pa.Table) -> tuple[pa.Table, dict]:
    stage = worker_stage(task.recipe, index - 1, task.hashes[index])
    outcome = stage.process(table)
    extra = dict(outcome.stats)
    if stage.report_name:  # its rows go to OUT/<report_name>.parquet: too many for stats.json
        report = pa.Table.from_pylist(extra.pop("report"), schema=stage.report_schema)
        _write(task.folder, task.folder.report(index, task.shard), report)
    if task.keep_removed and outcome.removed.num_rows:
        _write(task.folder, task.folder.removed(index, task.shard), outcome.removed)
    stats = {"shard": task.shard, "docs_in": table.num_rows, "bytes_in": text_bytes(table), "dropped": outcome.dropped}
    return outcome.kept, {**stats, **extra}


def _write(folder: RunFolder, path: str, table: pa.Table) -> None:
    folder.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    write_parquet_atomic(folder.fs, path, table)
