"""One fused task: the consecutive per-shard stages between two barriers, on one shard, in memory.

Plain Python that Ray schedules (curation/runner.py). The documents pass from stage to stage without touching
storage; only the stages in `writes` leave a part (the last one before a dedup stage and the final one, or every stage
with --materialize-all). A segment that reads an input file takes it in batches (`source.batch_documents`) through
its leading per-document stages, so a worker holds one batch of a Common Crawl file's pages, not the file; a stage
that needs the whole shard (`per_document = False`) gets the batches' output joined. Each stage still returns its own
stats, drop reasons and removed documents, summed over batches, and every file is renamed into place only when the
shard is done. The read stage names the input files (or records) it dropped: the first few per reason in its stats,
every one (path, drop_reason, bytes) in removed/00_read/ with --keep-removed.
"""

import errno
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from curation import dedup
from curation.file_digests import input_stamp
from curation.io import ParquetPartWriter, disk_full, read_parquet, write_parquet_atomic
from curation.pyarrow_without_pandas import keep_pandas_for_nanosecond_times
from curation.recipe import Recipe
from curation.run_folder import RunFolder
from curation.schema import text_bytes
from curation.sources import ReadResult
from curation.sources.readers import read_batches
from curation.stats import drop_samples
from curation.worker_stages import redacted, worker_stage
from shard_contract import file_digest

READ_REMOVED_SCHEMA = pa.schema([("path", pa.string()), ("drop_reason", pa.string()), ("bytes", pa.int64())])


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


# failures of the machine, not of the input: a rerun need not meet them again (Ray's by name, imported only where
# Ray is, and across its versions)
MACHINE_ERRORS = (MemoryError, ConnectionError, TimeoutError, InterruptedError, KeyboardInterrupt)
RAY_MACHINE_ERRORS = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "RayActorError", "ObjectLostError",
                      "OutOfMemoryError", "ObjectStoreFullError", "OutOfDiskError", "TaskCancelledError", "RaySystemError")


def rerun_may_fix(error: BaseException | None) -> bool:
    """Whether the failure is the machine's (a lost worker or node, memory, a full disk, a dropped connection, an
    interruption), which a rerun need not meet again; any other (a file that is no WARC, a missing column) is the
    input's or the recipe's and fails the same way until they change."""
    ray_exceptions = getattr(sys.modules.get("ray"), "exceptions", None)
    machine = MACHINE_ERRORS + tuple(getattr(ray_exceptions, name) for name in RAY_MACHINE_ERRORS
                                     if hasattr(ray_exceptions, name))  # fmt: skip
    while error is not None:
        if isinstance(error, machine) or isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return True
        error = error.__cause__ or error.__context__
    return False


class StageFailed(RuntimeError):
    """A stage of a fused task failed; carries the stage so the failure is reported where it happened, and whether a
    rerun may fix it, told where the cause is still at hand (its chain does not cross Ray)."""

    def __init__(self, stage_dir: str, message: str, reason: str = "", rerun_fixes: bool = False):
        super().__init__(stage_dir, message, reason, rerun_fixes)
        self.stage_dir, self.reason, self.rerun_fixes = stage_dir, reason or message, rerun_fixes

    def __str__(self) -> str:
        return self.args[1]


@dataclass
class _StageRun:
    """One stage's outputs and stats over all the batches of a shard."""

    index: int
    stats: dict
    part: ParquetPartWriter | None = None
    removed: ParquetPartWriter | None = None
    report: list = field(default_factory=list)
    seconds: float = 0.0


def run_segment(task: SegmentTask) -> list[dict]:
    """The segment's stages on one shard; returns each stage's stats. Raises StageFailed naming the stage and file,
    leaving no temporary part behind."""
    runs = {index: _open_run(task, index) for index in range(task.first, task.last + 1)}
    try:
        return _run_segment(task, runs)
    except BaseException:
        for run in runs.values():
            for writer in (run.part, run.removed):
                if writer:
                    writer.abort()
        raise


def _run_segment(task: SegmentTask, runs: dict[int, "_StageRun"]) -> list[dict]:
    read = ReadResult(table=pa.table({}))
    batches = _read_batches(task, runs[0], read) if task.first == 0 else _whole_part(task, runs[task.first])
    first_stage = max(task.first, 1)
    streamed = first_stage
    while streamed <= task.last and worker_stage(task.recipe, streamed - 1, task.hashes[streamed]).per_document:
        streamed += 1  # stages first_stage..streamed-1 take batches
    outputs = []
    for batch in batches:
        keep_pandas_for_nanosecond_times(batch.schema)
        output = _run_stages(task, runs, range(first_stage, streamed), batch)
        if streamed <= task.last:  # kept for a stage that needs the whole shard
            outputs.append(output)
    if outputs:
        _run_stages(task, runs, range(streamed, task.last + 1), pa.concat_tables(outputs))
    if task.first == 0:
        runs[0].stats.update(dropped=dict(read.dropped), bytes_in=read.bytes_in, input_sha256=read.sha256)
        if read.removed:
            samples = ({"path": path, "reason": reason, "bytes": size} for path, reason, size in read.removed)
            runs[0].stats["drop_samples"] = drop_samples(samples)
            if runs[0].removed:
                runs[0].removed.write(pa.table(list(zip(*read.removed)), schema=READ_REMOVED_SCHEMA))
        runs[0].stats["docs_in"] = runs[0].stats["docs_out"] + sum(read.dropped.values())
        records = runs[0].stats["docs_in"] if read.records is None else read.records
        if not records:  # an empty file, or not one of this source's kind: a failed shard, never a silent success
            kind = task.recipe.source.kind
            raise _failed(task, 0, ValueError(f"no {kind} record in it: is it empty, or not a {kind} input?"))
    return [_close(task, run) for run in runs.values()]


def _open_run(task: SegmentTask, index: int) -> _StageRun:
    stats = {"shard": task.shard, "docs_in": 0, "docs_out": 0, "bytes_in": 0, "bytes_out": 0, "dropped": {}}
    if task.keep_removed:  # a rerun with --keep-removed redoes what was done without it
        stats["removed_kept"] = True
    if index == 0:  # stamped before it is read: an input rewritten during the run reruns at the next
        stats.update(input=task.input, input_stamp=input_stamp(task.input))
    run = _StageRun(index, stats)
    if index in task.writes:
        run.part = ParquetPartWriter(task.folder.fs, task.folder.part(index, task.shard))
    if task.keep_removed:
        run.removed = ParquetPartWriter(task.folder.fs, task.folder.removed(index, task.shard))
    return run


def _failed(task: SegmentTask, index: int, error: Exception) -> StageFailed:
    stage_dir = task.folder.stage_dirs[index]
    cause = disk_full(error, task.folder.root) or repr(error)
    message = f"shard {task.shard} of {stage_dir} failed on {task.input}: {cause}"
    return StageFailed(stage_dir, message, cause, rerun_may_fix(error))


def _read_batches(task: SegmentTask, run: _StageRun, result: ReadResult) -> Iterator[pa.Table]:
    """Stage 0: the input file's documents, a batch at a time."""
    batches = read_batches(task.recipe.source, task.snapshot, task.input, result)
    while True:
        started = time.perf_counter()
        try:
            batch = next(batches, None)
        except Exception as error:
            raise _failed(task, 0, error) from error
        if batch is None:
            return
        _keep(task, run, batch, started)
        yield batch


def _whole_part(task: SegmentTask, run: _StageRun) -> Iterable[pa.Table]:
    """The previous stage's part, with the clusters a dedup stage's pass found."""
    started = time.perf_counter()
    try:
        table = read_parquet(task.folder.fs, task.input)
        if task.clusters is not None:
            table = dedup.attach_clusters(task.clusters, task.shard, table)
    except Exception as error:
        raise _failed(task, task.first, error) from error
    run.seconds += time.perf_counter() - started
    return [table]


def _run_stages(task: SegmentTask, runs: dict[int, _StageRun], indexes: range, table: pa.Table) -> pa.Table:
    for index in indexes:
        started, run = time.perf_counter(), runs[index]
        try:
            outcome = worker_stage(task.recipe, index - 1, task.hashes[index]).process(table)
            extra = dict(outcome.stats)
            run.report += extra.pop("report", [])  # its rows go to OUT/<report_name>.parquet: too many for stats.json
            run.stats["docs_in"] += table.num_rows
            run.stats["bytes_in"] += text_bytes(table)
            _merge(run.stats, {"dropped": outcome.dropped, **extra})
            if run.removed and outcome.removed.num_rows:
                run.removed.write(redacted(task.recipe, index, outcome.removed, task.hashes))  # never what a later stage redacts
            _keep(task, run, outcome.kept, started)
        except Exception as error:
            raise _failed(task, index, error) from error
        table = outcome.kept
    return table


def _keep(task: SegmentTask, run: _StageRun, kept: pa.Table, started: float) -> None:
    run.stats["docs_out"] += kept.num_rows
    run.stats["bytes_out"] += text_bytes(kept)
    if run.part:
        run.part.write(kept)
    run.seconds += time.perf_counter() - started


def _merge(into: dict, new: dict) -> None:
    """Adds a batch's stats: numbers add up, dicts merge key by key, sample lists keep as many as one batch gives."""
    for key, value in new.items():
        if isinstance(value, dict):
            _merge(into.setdefault(key, {}), value)
        elif isinstance(value, list):
            into[key] = (into.get(key, []) + value)[: max(len(into.get(key, [])), len(value))]
        else:
            into[key] = into.get(key, 0) + value


def _close(task: SegmentTask, run: _StageRun) -> dict:
    """Renames the stage's files into place (and writes its report rows); its stats with the seconds it took."""
    started = time.perf_counter()
    try:
        for writer in (run.part, run.removed):
            if writer:
                writer.close()
        if run.part and task.folder.fs.exists(run.part.path):  # what a reader of the run checks the part against
            with task.folder.fs.open(run.part.path, "rb") as handle:
                run.stats["part_sha256"] = file_digest(handle)[1]
        stage = worker_stage(task.recipe, run.index - 1, task.hashes[run.index]) if run.index else None
        if stage is not None and stage.report_name:
            path = task.folder.report(run.index, task.shard)
            task.folder.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            write_parquet_atomic(task.folder.fs, path, pa.Table.from_pylist(run.report, schema=stage.report_schema))
    except Exception as error:
        raise _failed(task, run.index, error) from error
    return {**run.stats, "seconds": round(run.seconds + time.perf_counter() - started, 4)}
