"""Runs a recipe on Ray, shard by shard, with atomic outputs, a manifest and resume.

Ray is only the executor: `run_segment` is plain Python that Ray schedules. The consecutive per-shard stages
between two barriers (a duplicate stage is a barrier) run fused, in one task on one shard, in memory, and write
once: the last stage before each barrier and the final stage (`materialize_all` writes every stage, today's
debugging layout). Each stage still gets its own stats, drop reasons and removed documents. Once every shard has
reached a duplicate stage, its corpus-wide pass (curation/dedup.py) runs as tasks per shard and per partition, then
the next segment starts with its filter. The driver is the only writer of the manifest, and a stage counts as done
only once the manifest says so and its part (when it writes one) exists: a run killed at any point reruns each
shard from its last written boundary into the same file names, never duplicating one.
"""

import os
import platform
import time
from dataclasses import dataclass, field
from importlib import metadata

import fsspec
import pyarrow as pa

from curation import dedup
from curation import stats as run_stats
from curation.io import read_parquet, write_parquet_atomic
from curation.recipe import Recipe, config_hash
from curation.run_folder import Manifest, RunFolder
from curation.schema import text_bytes
from curation.sources.code_tree import CodeReader
from curation.sources.parquet_documents import ParquetReader
from curation.sources.text_corpus import TextReader
from curation.sources.warc import WarcReader
from filters import STAGES
from filters.duplicates import DuplicateFilter


@dataclass
class SegmentTask:
    """Stages `first`..`last` of one shard, in memory, reading `input` (the input file when `first` is 0, else the
    part of stage `first - 1`) and writing the parts of the stages in `writes`."""

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


@dataclass
class ShardFailure:
    stage: str
    shard: int
    input: str
    error: str


class StageFailed(RuntimeError):
    """A stage of a fused task failed; carries the stage so the failure is reported where it happened."""

    def __init__(self, stage_dir: str, message: str):
        super().__init__(stage_dir, message)
        self.stage_dir = stage_dir

    def __str__(self) -> str:
        return self.args[1]


@dataclass
class RunResult:
    output: str
    failures: list[ShardFailure] = field(default_factory=list)
    skipped_shards: int = 0


def _read_input(task: SegmentTask) -> tuple[pa.Table, dict, dict, int, int]:
    """Stage 0: the input file as documents (kept, dropped, extra stats, docs in, bytes in)."""
    source = task.recipe.source
    readers = {"parquet": ParquetReader, "code": CodeReader, "warc": WarcReader, "text": TextReader}
    options = {"max_payload_bytes": source.max_payload_bytes} if source.kind == "warc" else {}
    if source.kind == "text" and "max_payload_bytes" in source.model_fields_set:  # else the reader's 50 MB
        options = {"max_file_bytes": source.max_payload_bytes}
    result = readers[source.kind](task.snapshot, source.source, **options).read(task.input)
    bytes_in = result.bytes_in if result.bytes_in is not None else fsspec.core.url_to_fs(task.input)[0].size(task.input)
    docs_in = result.table.num_rows + sum(result.dropped.values())
    return result.table, dict(result.dropped), {"input": task.input, "input_sha256": result.sha256}, docs_in, bytes_in


def run_segment(task: SegmentTask) -> list[dict]:
    """The segment's stages on one shard; returns each stage's stats. Raises StageFailed naming the stage and file."""
    fs, folder, table = task.folder.fs, task.folder, None
    results = []
    for index in range(task.first, task.last + 1):
        started = time.perf_counter()
        try:
            if index == 0:
                kept, dropped, extra, docs_in, bytes_in = _read_input(task)
                removed = None
            else:
                if table is None:
                    table = read_parquet(fs, task.input)
                    if task.clusters is not None:
                        table = dedup.attach_clusters(task.clusters, task.shard, table)
                stage = task.recipe.worker_stage(index - 1, task.hashes[index])
                outcome = stage.process(table)
                kept, dropped, removed, extra = outcome.kept, outcome.dropped, outcome.removed, dict(outcome.stats)
                docs_in, bytes_in = table.num_rows, text_bytes(table)
                if stage.report_name:  # its rows go to OUT/<report_name>.parquet: too many for stats.json
                    report = pa.Table.from_pylist(extra.pop("report"), schema=stage.report_schema)
                    _write(fs, folder.report(index, task.shard), report)
            if index in task.writes:
                _write(fs, folder.part(index, task.shard), kept)
            if task.keep_removed and removed is not None and removed.num_rows:
                _write(fs, folder.removed(index, task.shard), removed)
        except Exception as error:
            stage_dir = folder.stage_dirs[index]
            raise StageFailed(stage_dir, f"shard {task.shard} of {stage_dir} failed on {task.input}: {error!r}") from error
        table = kept
        results.append({
            "shard": task.shard, "docs_in": docs_in, "docs_out": kept.num_rows, "bytes_in": bytes_in,
            "bytes_out": text_bytes(kept), "dropped": dropped, "seconds": round(time.perf_counter() - started, 4), **extra,
        })  # fmt: skip
    return results


def _write(fs, path: str, table: pa.Table) -> None:
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    write_parquet_atomic(fs, path, table)


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("ray", "pyarrow", "trafilatura", "resiliparse", "fasttext-numpy2-wheel", "datatrove"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


def _init_ray(address: str | None, num_cpus: int | None) -> None:
    import logging

    import ray

    if ray.is_initialized():
        return
    if address:
        import curation
        import filters

        ray.init(address=address, runtime_env={"py_modules": [curation, filters]}, logging_level=logging.WARNING)
    else:
        ray.init(
            num_cpus=num_cpus or os.cpu_count(),
            include_dashboard=False,
            object_store_memory=200 * 1024**2,
            logging_level=logging.WARNING,
            log_to_driver=True,
        )


def run_pass_task(ctx: dedup.PassContext, step: str, *args) -> dict:
    started = time.perf_counter()
    stats = dedup.STEPS[step](ctx, *args)
    return {**stats, "seconds": round(time.perf_counter() - started, 4)}


class PassFailed(RuntimeError):
    pass


def _run_pass(ctx: dedup.PassContext, stage_dir: str, manifest: Manifest, on_step) -> None:
    """All steps of one duplicate stage's corpus-wide pass, skipping the tasks the manifest has as done."""
    import ray

    remote = ray.remote(run_pass_task).options(num_cpus=1, max_retries=0)
    passes = manifest.data["stages"][stage_dir].setdefault("passes", {})

    def step(name: str, kind: str, ids, *args) -> dict:
        done = passes.setdefault(name, {})
        pending = {remote.remote(ctx, kind, *args, i): i for i in ids if str(i) not in done}
        total = len(done) + len(pending)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(ready[0])
            try:
                done[str(task)] = ray.get(ready[0])
            except Exception as error:
                cause = getattr(error, "cause", None) or error
                raise PassFailed(f"{stage_dir}: step {name}, task {task} failed: {(str(cause).strip().splitlines() or [repr(cause)])[-1]}") from None
            manifest.save()
            if on_step:
                on_step(stage_dir, name, len(done), total)
        return done

    shards, partitions = sorted(ctx.parts), range(ctx.partitions)
    step("keys", "keys", shards)
    step("buckets", "buckets", partitions)
    if dedup.stage_of(ctx).verify_threshold is not None:
        step("verify-first", "verify-first", shards)
        step("verify-second", "verify-second", shards)
    for round_ in range(1, dedup.MAX_ROUNDS + 1):
        large = step(f"r{round_:03d}-large", "large", partitions, round_)
        if all(stats["converged"] for stats in large.values()):
            step("assign", "assign", partitions, round_)
            return
        step(f"r{round_:03d}-small", "small", partitions, round_)
    raise PassFailed(f"{stage_dir}: connected components did not converge in {dedup.MAX_ROUNDS} rounds")


def run(
    recipe: Recipe,
    inputs: list[str],
    output: str,
    snapshot: str,
    keep_removed: bool = False,
    ray_address: str | None = None,
    num_cpus: int | None = None,
    progress=None,
    on_step=None,
    materialize_all: bool = False,
) -> RunResult:
    """Run (or resume) `recipe` over `inputs` into `output`; `progress` gets (stage_dir, shard_stats) per finished
    stage of a shard, `on_step` (stage_dir, step, done, total) per finished task of a duplicate stage's pass."""
    import ray

    stage_dirs = recipe.stage_dirs()
    folder = RunFolder(output, stage_dirs)
    fs = folder.fs
    fs.makedirs(folder.root, exist_ok=True)
    hashes = [config_hash("read", recipe.source.model_dump(), inputs, snapshot)]
    for spec in recipe.stages:
        hashes.append(config_hash(hashes[-1], spec.model_dump()))
    manifest = Manifest(folder)
    for stage_dir, stage_hash in zip(stage_dirs, hashes):
        manifest.prepare(stage_dir, stage_hash)
    manifest.data.update(recipe=recipe.model_dump(), inputs=inputs, snapshot=snapshot, versions=_versions())
    manifest.save()

    _init_ray(ray_address, num_cpus)
    remote_segment = ray.remote(run_segment)
    result = RunResult(output=output)
    count = len(stage_dirs)
    barriers = {i + 1 for i, spec in enumerate(recipe.stages) if issubclass(STAGES[spec.stage], DuplicateFilter)}
    writes = frozenset(range(count)) if materialize_all else frozenset({b - 1 for b in barriers} | {count - 1})
    segment_end = {k: min([b - 1 for b in barriers if b > k] + [count - 1]) for k in range(count)}
    passes: dict[int, dedup.PassContext] = {}
    pending: dict = {}
    waiting: dict[int, list[int]] = {}  # barrier stage -> shards that reached it

    def written(stage: int, shard: int) -> bool:
        return stage in writes and fs.exists(folder.part(stage, shard))

    def done(stage: int, shard: int) -> bool:
        return manifest.recorded(stage_dirs[stage], shard) and (stage not in writes or written(stage, shard))

    def submit(first: int, shard: int) -> None:
        task = SegmentTask(
            recipe, first, segment_end[first], shard, inputs[shard] if first == 0 else folder.part(first - 1, shard),
            folder, writes, keep_removed, snapshot, hashes, passes.get(first),
        )  # fmt: skip
        cpus = max(1.0 if k == 0 else STAGES[recipe.stages[k - 1].stage].num_cpus for k in range(first, task.last + 1))
        pending[remote_segment.options(num_cpus=cpus, max_retries=0).remote(task)] = task

    def advance(stage: int, shard: int) -> None:
        """Submit the shard's next unfinished stages from their last written boundary, or park the shard at a
        duplicate stage whose pass has not run."""
        first_undone = stage
        while first_undone < count and done(first_undone, shard):
            first_undone += 1
        start = first_undone
        while 0 < start < count and not written(start - 1, shard):  # its input was not kept: rerun from a boundary
            start -= 1
        for skipped in range(stage, max(stage, start)):
            if progress:
                progress(stage_dirs[skipped], None)
            result.skipped_shards += 1
        if start == count:
            return
        if start in barriers and start not in passes:
            waiting.setdefault(start, []).append(shard)
        else:
            submit(start, shard)

    for shard in range(len(inputs)):
        advance(0, shard)
    while pending or waiting:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(ready[0])
            try:
                stage_stats = ray.get(ready[0])
            except Exception as error:
                cause = getattr(error, "cause", None) or error
                stage_dir = getattr(cause, "stage_dir", stage_dirs[task.first])
                result.failures.append(ShardFailure(stage_dir, task.shard, task.input, (str(cause).strip().splitlines() or [repr(cause)])[-1]))
                continue
            for stage, shard_stats in zip(range(task.first, task.last + 1), stage_stats):
                manifest.record(stage_dirs[stage], shard_stats)
                if progress:
                    progress(stage_dirs[stage], shard_stats)
            manifest.save()
            advance(task.last + 1, task.shard)
        if not waiting:
            break
        barrier = min(waiting)
        stage_dir = stage_dirs[barrier]
        if result.failures:
            failed = ", ".join(f"shard {f.shard} failed at {f.stage}" for f in result.failures)
            reason = f"not run: dedup needs every shard, and {failed}; fix that input and rerun"
            for shard in waiting.pop(barrier):
                result.failures.append(ShardFailure(stage_dir, shard, folder.part(barrier - 1, shard), reason))
            continue
        entry = manifest.data["stages"][stage_dir]
        if "partitions" not in entry:  # fixed on the first attempt, so a resumed pass keeps its file layout
            params = recipe.build(barrier - 1).params
            keys_per_doc = getattr(params, "bands", 1)
            docs = sum(s["docs_out"] for s in manifest.data["stages"][stage_dirs[barrier - 1]]["shards"].values())
            entry["partitions"] = max(1, -(-docs * keys_per_doc // params.partition_records))
        passes[barrier] = dedup.PassContext(
            recipe=recipe,
            stage_index=barrier - 1,
            stage_hash=hashes[barrier],
            work=folder.work(barrier),
            parts={shard: folder.part(barrier - 1, shard) for shard in range(len(inputs))},
            partitions=entry["partitions"],
        )
        try:
            _run_pass(passes[barrier], stage_dir, manifest, on_step)
        except PassFailed as error:
            for shard in waiting.pop(barrier):
                result.failures.append(ShardFailure(stage_dir, shard, folder.part(barrier - 1, shard), str(error)))
            continue
        for shard in waiting.pop(barrier):
            submit(barrier, shard)

    for barrier in barriers:  # a finished pass's files are no longer needed; its stats stay in the manifest
        entry = manifest.data["stages"][stage_dirs[barrier]]
        work = folder.path(f"work/{stage_dirs[barrier]}")
        if "passes" in entry and all(done(barrier, shard) for shard in range(len(inputs))):
            if fs.exists(work):
                fs.rm(work, recursive=True)
            entry["pass_stats"] = run_stats.summarize_pass(entry.pop("passes"))
            manifest.save()
    for index, spec in enumerate(recipe.stages):  # a stage's report parts as one file, e.g. OUT/decontamination.parquet
        stage_class = STAGES[spec.stage]
        reports = folder.path(f"reports/{stage_dirs[index + 1]}")
        if stage_class.report_name and fs.exists(reports):
            parts = [read_parquet(fs, path) for path in sorted(fs.glob(f"{reports}/part-*.parquet"))]
            merged = pa.concat_tables(parts) if parts else stage_class.report_schema.empty_table()
            write_parquet_atomic(fs, folder.path(f"{stage_class.report_name}.parquet"), merged)
    run_stats.write(fs, folder.root, manifest.data, stage_dirs)
    return result
