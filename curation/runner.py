"""Runs a recipe on Ray, shard by shard, with atomic outputs, a manifest and resume.

Ray is only the executor: `run_shard` is plain Python (read a part, run a stage, write a part) that Ray
schedules. A shard moves to its next stage as soon as its previous one finishes, so stages overlap. A duplicate
stage is a barrier: once every shard has reached it, its corpus-wide pass (curation/dedup.py) runs as tasks
per shard and per partition, then its filter runs per shard again. The driver is the only writer of the
manifest, and a shard (or pass task) counts as done only once the manifest says so: a run killed at any point
reruns the unfinished ones into the same file names, never duplicating one.
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
from curation.io import read_json, read_parquet, remove_temporaries, write_json_atomic, write_parquet_atomic
from curation.recipe import Recipe, config_hash
from curation.schema import text_bytes
from curation.sources.code_tree import CodeReader
from curation.sources.parquet_documents import ParquetReader
from curation.sources.text_corpus import TextReader
from curation.sources.warc import WarcReader
from filters import STAGES
from filters.duplicates import DuplicateFilter

MANIFEST = "manifest.json"


@dataclass
class ShardTask:
    recipe: Recipe
    stage_index: int  # 0 reads the input file; k > 0 runs recipe.stages[k-1]
    shard: int
    input: str  # the input file for stage 0, else the previous stage's part
    output: str
    removed: str | None
    snapshot: str
    stage_hash: str
    clusters: dedup.PassContext | None = None  # for a duplicate stage: where its pass left the clusters


@dataclass
class ShardFailure:
    stage: str
    shard: int
    input: str
    error: str


@dataclass
class RunResult:
    output: str
    failures: list[ShardFailure] = field(default_factory=list)
    skipped_shards: int = 0


def part_name(shard: int) -> str:
    return f"part-{shard:05d}.parquet"


def run_shard(task: ShardTask) -> dict:
    """One stage on one shard; returns that shard's stats. Raises with the file named when the file itself fails."""
    fs, _ = fsspec.core.url_to_fs(task.output)
    started = time.perf_counter()
    try:
        if task.stage_index == 0:
            source = task.recipe.source
            readers = {"parquet": ParquetReader, "code": CodeReader, "warc": WarcReader, "text": TextReader}
            options = {"max_payload_bytes": source.max_payload_bytes} if source.kind == "warc" else {}
            if source.kind == "text" and "max_payload_bytes" in source.model_fields_set:  # else the reader's 50 MB
                options = {"max_file_bytes": source.max_payload_bytes}
            result = readers[source.kind](task.snapshot, source.source, **options).read(task.input)
            kept, dropped, removed = result.table, dict(result.dropped), None
            extra = {"input": task.input, "input_sha256": result.sha256}
            docs_in = kept.num_rows + sum(dropped.values())
            bytes_in = result.bytes_in if result.bytes_in is not None else fsspec.core.url_to_fs(task.input)[0].size(task.input)
        else:
            table = read_parquet(fs, task.input)
            if task.clusters is not None:
                table = dedup.attach_clusters(task.clusters, task.shard, table)
            stage = task.recipe.worker_stage(task.stage_index - 1, task.stage_hash)
            outcome = stage.process(table)
            kept, dropped, removed, extra = outcome.kept, outcome.dropped, outcome.removed, dict(outcome.stats)
            docs_in, bytes_in = table.num_rows, text_bytes(table)
            if stage.report_name:  # its rows go to OUT/<report_name>.parquet: too many for stats.json
                report = pa.Table.from_pylist(extra.pop("report"), schema=stage.report_schema)
                folder = task.output.rsplit("/", 2)
                fs.makedirs(f"{folder[0]}/reports/{folder[1]}", exist_ok=True)
                write_parquet_atomic(fs, f"{folder[0]}/reports/{folder[1]}/{folder[2]}", report)
        write_parquet_atomic(fs, task.output, kept)
        if task.removed and removed is not None and removed.num_rows:
            fs.makedirs(task.removed.rsplit("/", 1)[0], exist_ok=True)
            write_parquet_atomic(fs, task.removed, removed)
    except Exception as error:
        raise RuntimeError(f"shard {task.shard} of {task.output.rsplit('/', 2)[-2]} failed on {task.input}: {error!r}") from error
    return {
        "shard": task.shard,
        "docs_in": docs_in,
        "docs_out": kept.num_rows,
        "bytes_in": bytes_in,
        "bytes_out": text_bytes(kept),
        "dropped": dropped,
        "seconds": round(time.perf_counter() - started, 4),
        **extra,
    }


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("ray", "pyarrow", "trafilatura", "resiliparse", "fasttext-numpy2-wheel", "datatrove"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


class Manifest:
    """What is done: per stage its chained config hash and finished shards with their stats."""

    def __init__(self, fs, root: str):
        self.fs, self.root = fs, root
        self.path = f"{root}/{MANIFEST}"
        self.data = read_json(fs, self.path) if fs.exists(self.path) else {"stages": {}}

    def prepare(self, stage_dir: str, stage_hash: str) -> None:
        """Forget a stage whose config changed (its hash chains in every earlier stage) and delete its parts."""
        entry = self.data["stages"].get(stage_dir)
        if entry is None or entry["config_hash"] != stage_hash:
            for folder in (f"{self.root}/{stage_dir}", f"{self.root}/removed/{stage_dir}", f"{self.root}/work/{stage_dir}", f"{self.root}/reports/{stage_dir}"):
                if self.fs.exists(folder):
                    self.fs.rm(folder, recursive=True)
            self.data["stages"][stage_dir] = {"config_hash": stage_hash, "shards": {}}
        remove_temporaries(self.fs, f"{self.root}/{stage_dir}")
        remove_temporaries(self.fs, f"{self.root}/removed/{stage_dir}")
        remove_temporaries(self.fs, f"{self.root}/work/{stage_dir}")
        remove_temporaries(self.fs, f"{self.root}/reports/{stage_dir}")
        self.fs.makedirs(f"{self.root}/{stage_dir}", exist_ok=True)

    def done(self, stage_dir: str, shard: int) -> bool:
        return str(shard) in self.data["stages"][stage_dir]["shards"] and self.fs.exists(
            f"{self.root}/{stage_dir}/{part_name(shard)}"
        )

    def record(self, stage_dir: str, shard_stats: dict) -> None:
        self.data["stages"][stage_dir]["shards"][str(shard_stats["shard"])] = shard_stats
        self.save()

    def save(self) -> None:
        write_json_atomic(self.fs, self.path, self.data)


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
) -> RunResult:
    """Run (or resume) `recipe` over `inputs` into `output`; `progress` gets (stage_dir, shard_stats) per finished
    shard, `on_step` (stage_dir, step, done, total) per finished task of a duplicate stage's pass."""
    import ray

    fs, root = fsspec.core.url_to_fs(output)
    root = root.rstrip("/")
    fs.makedirs(root, exist_ok=True)
    stage_dirs = recipe.stage_dirs()
    hashes = [config_hash("read", recipe.source.model_dump(), inputs, snapshot)]
    for spec in recipe.stages:
        hashes.append(config_hash(hashes[-1], spec.model_dump()))
    manifest = Manifest(fs, root)
    for stage_dir, stage_hash in zip(stage_dirs, hashes):
        manifest.prepare(stage_dir, stage_hash)
    manifest.data.update(recipe=recipe.model_dump(), inputs=inputs, snapshot=snapshot, versions=_versions())
    manifest.save()

    _init_ray(ray_address, num_cpus)
    remote_shard = ray.remote(run_shard)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    prefix = "" if protocol in ("file", "local") else f"{protocol}://"
    result = RunResult(output=output)
    barriers = {i + 1 for i, spec in enumerate(recipe.stages) if issubclass(STAGES[spec.stage], DuplicateFilter)}
    passes: dict[int, dedup.PassContext] = {}

    def part(stage_index: int, shard: int) -> str:
        return f"{prefix}{root}/{stage_dirs[stage_index]}/{part_name(shard)}"

    def submit(stage_index: int, shard: int):
        task = ShardTask(
            recipe=recipe,
            stage_index=stage_index,
            shard=shard,
            input=inputs[shard] if stage_index == 0 else part(stage_index - 1, shard),
            output=part(stage_index, shard),
            removed=f"{prefix}{root}/removed/{stage_dirs[stage_index]}/{part_name(shard)}" if keep_removed else None,
            snapshot=snapshot,
            stage_hash=hashes[stage_index],
            clusters=passes.get(stage_index),
        )
        cpus = 1.0 if stage_index == 0 else STAGES[recipe.stages[stage_index - 1].stage].num_cpus
        pending[remote_shard.options(num_cpus=cpus, max_retries=0).remote(task)] = task

    pending: dict = {}
    waiting: dict[int, list[int]] = {}  # barrier stage -> shards that reached it

    def advance(stage_index: int, shard: int) -> None:
        """Submit the shard's next unfinished stage, or park it at a duplicate stage whose pass has not run."""
        while stage_index < len(stage_dirs) and manifest.done(stage_dirs[stage_index], shard):
            if progress:
                progress(stage_dirs[stage_index], None)
            result.skipped_shards += 1
            stage_index += 1
        if stage_index == len(stage_dirs):
            return
        if stage_index in barriers and stage_index not in passes:
            waiting.setdefault(stage_index, []).append(shard)
        else:
            submit(stage_index, shard)

    for shard in range(len(inputs)):
        advance(0, shard)
    while pending or waiting:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(ready[0])
            stage_dir = stage_dirs[task.stage_index]
            try:
                shard_stats = ray.get(ready[0])
            except Exception as error:
                cause = getattr(error, "cause", None) or error
                result.failures.append(ShardFailure(stage_dir, task.shard, task.input, (str(cause).strip().splitlines() or [repr(cause)])[-1]))
                continue
            manifest.record(stage_dir, shard_stats)
            if progress:
                progress(stage_dir, shard_stats)
            advance(task.stage_index + 1, task.shard)
        if not waiting:
            break
        barrier = min(waiting)
        stage_dir = stage_dirs[barrier]
        if result.failures:
            failed = ", ".join(f"shard {f.shard} failed at {f.stage}" for f in result.failures)
            reason = f"not run: dedup needs every shard, and {failed}; fix that input and rerun"
            for shard in waiting.pop(barrier):
                result.failures.append(ShardFailure(stage_dir, shard, part(barrier - 1, shard), reason))
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
            work=f"{prefix}{root}/work/{stage_dir}",
            parts={shard: part(barrier - 1, shard) for shard in range(len(inputs))},
            partitions=entry["partitions"],
        )
        try:
            _run_pass(passes[barrier], stage_dir, manifest, on_step)
        except PassFailed as error:
            for shard in waiting.pop(barrier):
                result.failures.append(ShardFailure(stage_dir, shard, part(barrier - 1, shard), str(error)))
            continue
        for shard in waiting.pop(barrier):
            submit(barrier, shard)

    for barrier in barriers:  # a finished pass's files are no longer needed; its stats stay in the manifest
        entry = manifest.data["stages"][stage_dirs[barrier]]
        if "passes" in entry and all(manifest.done(stage_dirs[barrier], shard) for shard in range(len(inputs))):
            if fs.exists(f"{root}/work/{stage_dirs[barrier]}"):
                fs.rm(f"{root}/work/{stage_dirs[barrier]}", recursive=True)
            entry["pass_stats"] = run_stats.summarize_pass(entry.pop("passes"))
            manifest.save()
    for index, spec in enumerate(recipe.stages):  # a stage's report parts as one file, e.g. OUT/decontamination.parquet
        stage_class = STAGES[spec.stage]
        folder = f"{root}/reports/{stage_dirs[index + 1]}"
        if stage_class.report_name and fs.exists(folder):
            parts = [read_parquet(fs, path) for path in sorted(fs.glob(f"{folder}/part-*.parquet"))]
            merged = pa.concat_tables(parts) if parts else stage_class.report_schema.empty_table()
            write_parquet_atomic(fs, f"{root}/{stage_class.report_name}.parquet", merged)
    run_stats.write(fs, root, manifest.data, stage_dirs)
    return result
