"""Runs a recipe on Ray, shard by shard, with atomic outputs, a manifest and resume. It only schedules.

The consecutive per-shard stages between two barriers (a duplicate stage is a barrier) run as one fused task per
shard (curation/segment.py), which writes the last stage before each barrier and the final stage (every stage with
`materialize_all`). Once every shard has reached a duplicate stage, its corpus-wide pass (curation/dedup.py, which
owns the step order) runs through `_fan_out`, then the next segment starts with the stage's filter. The driver is the
only writer of the manifest (curation/run_folder.py), and a stage counts as done only once the manifest says so and
its part (when it writes one) exists: a run killed at any point reruns each shard from its last written boundary into
the same file names, never duplicating one.
"""

import platform
from collections import deque
from dataclasses import dataclass, field
from importlib import metadata

import pyarrow as pa

from curation import dedup, ray_session
from curation import stats as run_stats
from curation.file_digests import input_stamps, same_content
from curation.io import disk_full, read_parquet, write_parquet_atomic
from curation.pyarrow_without_pandas import spare_workers_pandas
from curation.recipe import Recipe
from curation.run_folder import LOCK_FILE, Manifest, RunFolder
from curation.segment import SegmentTask, rerun_may_fix, run_segment
from filters import REPORT_NAMES, STAGES
from filters.duplicates import DuplicateFilter
from shard_contract import folder_lock


@dataclass
class ShardFailure:
    stage: str
    shard: int
    input: str
    error: str
    rerun_fixes: bool = False  # the machine failed (a lost worker, a full disk, ...), not the input or the recipe


@dataclass
class RunResult:
    output: str
    failures: list[ShardFailure] = field(default_factory=list)
    skipped_shards: int = 0
    removed_stages: list[str] = field(default_factory=list)  # stage folders an earlier recipe left in the output
    released_stages: list[str] = field(default_factory=list)  # parts deleted at the end: a later stage redacts their text
    changed_files: dict[str, list[str]] = field(default_factory=dict)  # stage folder -> changed files it loads: rerun
    changed_inputs: list[str] = field(default_factory=list)  # inputs rewritten since they were read: their shards rerun
    rerun_for_removed: list[str] = field(default_factory=list)  # stages done without --keep-removed, redone with it


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
    keep_intermediate: bool = False,
) -> RunResult:
    """Run (or resume) `recipe` over `inputs` into `output`; `progress` gets (stage_dir, shard_stats) per finished
    stage of a shard, `on_step` (stage_dir, step, done, total) per finished task of a duplicate stage's pass. Once
    every shard is finished, the parts written before a redacting stage (secrets, PII) are deleted unless
    `keep_intermediate`: they hold the text it redacted."""
    lock = folder_lock.acquire(output, LOCK_FILE, "curate run")  # before Ray: a second run into `output` is refused
    try:
        started = ray_session.connect(ray_address, num_cpus, owner=output)
        try:
            scheduler = _Scheduler(recipe, inputs, output, snapshot, keep_removed, materialize_all, progress, on_step,
                                   keep_intermediate)  # fmt: skip
            scheduler.run()
            return scheduler.result
        finally:
            ray_session.disconnect(started, owner=output)
    finally:
        folder_lock.release(output, lock)


TASK_RETRIES = 3
# tasks in flight: enough to keep every worker fed and to show an autoscaling cluster (whose head may have no CPU)
# the demand of 1,000 CPUs, few enough that the driver's ray.wait, which costs O(tasks pending) per finished task
# (0.20 ms at 1,000, 4.91 ms at 20,000 here: benchmarks/ray_wait_pending.py), stays small on a snapshot of 90,000 files
IN_FLIGHT_PER_CPU = 4
MIN_IN_FLIGHT = 1_000


def _node() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _segment_on_node(task: SegmentTask) -> list[dict]:
    """run_segment, with the Ray node that ran it in each stage's stats."""
    spare_workers_pandas()
    node = _node()
    return [{**stats, "node": node} for stats in run_segment(task)]


class _GpuSegments:
    """A Ray actor holding GPUs: it runs the segments of one GPU stage, whose model its process loads once."""

    def run(self, task: SegmentTask) -> list[dict]:
        import ray

        return [{**stats, "gpu_ids": [str(i) for i in ray.get_gpu_ids()]} for stats in _segment_on_node(task)]


def _pass_task_on_node(ctx: dedup.PassContext, step: str, *args) -> dict:
    spare_workers_pandas()
    return {**dedup.run_task(ctx, step, *args), "node": _node()}


def ray_task_error(error: Exception) -> Exception:
    """The exception a task raised, out of Ray's wrapper."""
    return getattr(error, "cause", None) or error


def last_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [repr(error)])[-1]


SETTLE_SECONDS = 60  # a cancelled task stops once back in Python, a GPU actor's not at all: waited this long at most


def settle(references) -> None:
    """Cancel tasks the driver gives up on and wait for them to end. A task interrupted mid-write removes its
    temporary (run_segment's abort, write_parquet_atomic); left running, it outlived a driver that stopped on an
    error (a full disk under its manifest save) and was still writing when the command had returned. Not on Ctrl-C:
    Ray's shutdown ends the tasks (the next run removes their temporaries), and a cancel that met a task as it
    finished crashed its worker with Ray's "unexpected system state" check (1 of a shuffled suite's runs)."""
    import ray

    references = list(references)
    for reference in references:
        ray.cancel(reference)
    if references:
        ray.wait(references, num_returns=len(references), timeout=SETTLE_SECONDS)


class _Scheduler:
    """Submits each shard's next fused segment, parks shards at a duplicate stage until all have reached it, then
    runs that stage's pass and releases them."""

    def __init__(self, recipe, inputs, output, snapshot, keep_removed, materialize_all, progress, on_step, keep_intermediate=False):
        import ray

        self.recipe, self.inputs, self.snapshot, self.keep_removed = recipe, inputs, snapshot, keep_removed
        self.keep_intermediate = keep_intermediate
        self.progress, self.on_step = progress, on_step
        self.stage_dirs = recipe.stage_dirs()
        self.folder = RunFolder(output, self.stage_dirs)
        self.loads = recipe.stage_loads()
        self.hashes = recipe.stage_hashes(inputs, snapshot, self.loads)
        self.manifest = Manifest.start(self.folder, self.hashes, self.loads, recipe=recipe.model_dump(), inputs=inputs,
                                       snapshot=snapshot, versions=_versions())  # fmt: skip
        count = len(self.stage_dirs)
        self.barriers = {i + 1 for i, spec in enumerate(recipe.stages) if issubclass(STAGES[spec.stage], DuplicateFilter)}
        # a stage that declares GPUs runs alone in its segment, in actors that each hold GPUs (where the cluster has
        # them): the parts around it are written, so the CPU stages before and after it run as tasks beside them
        gpus = ray.cluster_resources().get("GPU", 0)
        self.gpu_stages = {i + 1 for i, spec in enumerate(recipe.stages) if 0 < STAGES[spec.stage].num_gpus <= gpus}
        ends = {b - 1 for b in self.barriers} | {count - 1} | {g - 1 for g in self.gpu_stages} | self.gpu_stages
        self.writes = frozenset(range(count)) if materialize_all else frozenset(ends)
        self.segment_end = {k: min(end for end in ends if end >= k) for k in range(count)}
        self.result = RunResult(output=output, removed_stages=self.manifest.forgotten,
                                changed_files=self.manifest.changed_files)  # fmt: skip
        self.rerun_changed_inputs()
        if keep_removed:
            self.rerun_without_removed()
        self.redo_released()
        self.remove_stale_reports()
        self.passes: dict[int, dedup.PassContext] = {}
        self.pending: dict = {}  # Ray reference -> SegmentTask
        self.ready = deque((0, shard) for shard in range(len(inputs)))  # (stage, shard) to move on as tasks finish
        self.in_flight = max(MIN_IN_FLIGHT, IN_FLIGHT_PER_CPU * int(ray.cluster_resources().get("CPU", 1)))
        self.waiting: dict[int, list[int]] = {}  # barrier stage -> shards that reached it
        # a task lost with its worker or node is retried (its writes are atomic, under fixed names); one that raised
        # is not: a bad input fails the same way twice
        self.remote_segment = ray.remote(_segment_on_node)
        self.remote_pass_task = ray.remote(_pass_task_on_node).options(num_cpus=1, max_retries=TASK_RETRIES)
        self.actors: dict[int, list] = {}  # GPU stage -> its actors, started at its first segment
        self.actor_load: dict = {}  # actor -> segments submitted to it and not yet collected
        self.actor_of: dict = {}  # Ray reference -> the actor running it

    def remove_stale_reports(self) -> None:
        """The report file of a stage an earlier recipe had (e.g. decontamination.parquet), gone with its stage."""
        current = {REPORT_NAMES.get(spec.stage) for spec in self.recipe.stages}
        for name in set(REPORT_NAMES.values()) - current:
            stale = self.folder.path(f"{name}.parquet")
            if self.folder.fs.exists(stale):
                self.folder.fs.rm(stale)

    def run(self) -> None:
        try:
            self.move_on()
            while self.pending or self.waiting:
                self.collect_segments()
                if self.waiting:
                    self.run_barrier(min(self.waiting))
        except Exception:  # the driver stops (its own write failed): no segment goes on writing without it
            settle(self.pending)
            raise
        self.finish()

    def move_on(self) -> None:
        """Advance ready shards while fewer than `in_flight` tasks are pending (a shard the manifest has as done
        is skipped at once, submitting nothing)."""
        while self.ready and len(self.pending) < self.in_flight:
            self.advance(*self.ready.popleft())

    def written(self, stage: int, shard: int) -> bool:
        return stage in self.writes and self.folder.fs.exists(self.folder.part(stage, shard))

    def done(self, stage: int, shard: int) -> bool:
        stage_dir = self.stage_dirs[stage]
        kept = stage not in self.writes or self.manifest.data["stages"][stage_dir].get("released") or self.written(stage, shard)
        return self.manifest.recorded(stage_dir, shard) and bool(kept)

    def rerun_changed_inputs(self) -> None:
        """Forget each shard whose input changed since it was read (its size or time differ and, for a file, its
        bytes), in every stage before the first duplicate stage; from that stage on every shard is redone, since its
        pass reads them all."""
        read = self.manifest.data["stages"][self.stage_dirs[0]]["shards"]
        recorded = sorted(int(shard) for shard in read)
        changed = []
        for shard, stamp in zip(recorded, input_stamps([self.inputs[shard] for shard in recorded])):
            stats = read[str(shard)]
            if stats.get("input_stamp") == stamp:
                continue
            if stamp is not None and same_content(self.inputs[shard], stats.get("input_sha256", "")):
                stats["input_stamp"] = stamp  # touched or copied, the same bytes: its results stand
                continue
            changed.append(shard)
        if not changed:
            return
        first_barrier = min(self.barriers, default=len(self.stage_dirs))
        for stage in range(len(self.stage_dirs)):
            if stage < first_barrier:
                for shard in changed:
                    self.manifest.forget_shard(stage, shard)
            else:
                self.manifest.reset(self.stage_dirs[stage], self.hashes[stage], self.loads[stage])
        self.result.changed_inputs = [self.inputs[shard] for shard in changed]
        self.manifest.save()

    def rerun_without_removed(self) -> None:
        """--keep-removed on a folder run without it: the stages done without keeping their removed documents are
        redone, so they are written rather than silently missing."""
        for stage, stage_dir in enumerate(self.stage_dirs):
            shards = self.manifest.data["stages"][stage_dir]["shards"]
            if any(not stats.get("removed_kept") for stats in shards.values()):
                self.manifest.reset(stage_dir, self.hashes[stage], self.loads[stage])
                self.result.rerun_for_removed.append(stage_dir)
        if self.result.rerun_for_removed:
            self.manifest.save()

    def redo_released(self) -> None:
        """A finished run whose parts before a redacting stage were deleted has nothing to resume a shard from: when a
        shard must be redone (its final part was deleted, a later stage's config changed), every stage from the first
        deleted one is redone for every shard, since a duplicate stage's pass needs them all."""
        released = [i for i, stage_dir in enumerate(self.stage_dirs) if self.manifest.data["stages"][stage_dir].get("released")]
        final = len(self.stage_dirs) - 1
        if not released or all(self.done(final, shard) for shard in range(len(self.inputs))):
            return
        for stage in range(released[0], len(self.stage_dirs)):
            self.manifest.reset(self.stage_dirs[stage], self.hashes[stage], self.loads[stage])
        self.manifest.save()

    def advance(self, stage: int, shard: int) -> None:
        """Submit the shard's next unfinished stages from their last written boundary, or park the shard at a
        duplicate stage whose pass has not run."""
        count = len(self.stage_dirs)
        first_undone = stage
        while first_undone < count and self.done(first_undone, shard):
            first_undone += 1
        start = first_undone
        while 0 < start < count and not self.written(start - 1, shard):  # its input was not kept: rerun from a boundary
            start -= 1
        for skipped in range(stage, max(stage, start)):
            if self.progress:
                self.progress(self.stage_dirs[skipped], None)
            self.result.skipped_shards += 1
        if start == count:
            return
        if start in self.barriers and start not in self.passes:
            self.waiting.setdefault(start, []).append(shard)
        else:
            self.submit(start, shard)

    def submit(self, first: int, shard: int) -> None:
        last = self.segment_end[first]
        task = SegmentTask(
            self.recipe, first, last, shard, self.inputs[shard] if first == 0 else self.folder.part(first - 1, shard),
            self.folder, self.writes, self.keep_removed, self.snapshot, self.hashes, self.passes.get(first),
        )  # fmt: skip
        if first in self.gpu_stages:
            actor = min(self.gpu_actors(first), key=lambda a: self.actor_load[a])
            self.actor_load[actor] += 1
            reference = actor.run.remote(task)
            self.actor_of[reference] = actor
            self.pending[reference] = task
            return
        cpus = max(1.0 if k == 0 else STAGES[self.recipe.stages[k - 1].stage].num_cpus for k in range(first, last + 1))
        self.pending[self.remote_segment.options(num_cpus=cpus, max_retries=TASK_RETRIES).remote(task)] = task

    def gpu_actors(self, stage: int) -> list:
        """The stage's actors: as many as the cluster has GPUs for, each loading the stage's model once."""
        import ray

        if stage not in self.actors:
            per_actor = STAGES[self.recipe.stages[stage - 1].stage].num_gpus
            count = max(1, int(ray.cluster_resources().get("GPU", 0) // per_actor))
            actor_class = ray.remote(_GpuSegments).options(num_cpus=1, num_gpus=per_actor, max_restarts=TASK_RETRIES,
                                                           max_task_retries=TASK_RETRIES)  # fmt: skip
            self.actors[stage] = [actor_class.remote() for _ in range(count)]
            self.actor_load.update({actor: 0 for actor in self.actors[stage]})
        return self.actors[stage]

    def collect_segments(self) -> None:
        """Record every running segment as it finishes and move its shard on."""
        import ray

        while self.pending:
            (finished,), _ = ray.wait(list(self.pending), num_returns=1)
            task = self.pending.pop(finished)
            if finished in self.actor_of:
                self.actor_load[self.actor_of.pop(finished)] -= 1
            try:
                stage_stats = ray.get(finished)
            except Exception as error:
                cause = ray_task_error(error)
                stage_dir = getattr(cause, "stage_dir", self.stage_dirs[task.first])
                why = getattr(cause, "reason", None) or last_line(cause)  # the stage, shard and input are fields already
                rerun_fixes = getattr(cause, "rerun_fixes", None)
                if rerun_fixes is None:  # not a stage's failure: a lost worker, or the task's own write
                    rerun_fixes = rerun_may_fix(cause) or rerun_may_fix(error)
                self.result.failures.append(ShardFailure(stage_dir, task.shard, task.input, why, rerun_fixes))
            else:
                for stage, shard_stats in zip(range(task.first, task.last + 1), stage_stats):
                    self.manifest.record(self.stage_dirs[stage], shard_stats)
                    if self.progress:
                        self.progress(self.stage_dirs[stage], shard_stats)
                self.manifest.save_soon()
                self.advance(task.last + 1, task.shard)
            self.move_on()
        self.manifest.save_if_unsaved()

    def run_barrier(self, barrier: int) -> None:
        """The duplicate stage's corpus-wide pass over every shard, then its filter on each; a shard that failed
        earlier fails the pass too, since it needs them all."""
        stage_dir, shards = self.stage_dirs[barrier], self.waiting.pop(barrier)
        previous = self.stage_dirs[barrier - 1]
        if self.result.failures:
            failed = ", ".join(f"shard {f.shard} failed at {f.stage}" for f in self.result.failures)
            reason = f"not run: dedup needs every shard, and {failed}"
            self._fail(stage_dir, barrier, shards, reason, all(f.rerun_fixes for f in self.result.failures))
            return
        entry = self.manifest.data["stages"][stage_dir]
        ctx = dedup.PassContext.sized(
            self.recipe, barrier - 1, self.hashes[barrier], self.folder.work(barrier),
            {shard: self.folder.part(barrier - 1, shard) for shard in range(len(self.inputs))},
            docs=self.manifest.docs_out(previous), partitions=entry.get("partitions"),
        )  # fmt: skip
        entry["partitions"] = ctx.partitions  # fixed on the first attempt, so a resumed pass keeps its file layout
        try:
            dedup.run_pass(ctx, self._fan_out(ctx, stage_dir))
        except dedup.PassFailed as error:
            self._fail(stage_dir, barrier, shards, f"{stage_dir}: {error}", error.rerun_fixes)
            return
        self.passes[barrier] = ctx
        self.ready.extend((barrier, shard) for shard in shards)
        self.move_on()

    def _fail(self, stage_dir: str, barrier: int, shards: list[int], reason: str, rerun_fixes: bool) -> None:
        for shard in shards:
            part = self.folder.part(barrier - 1, shard)
            self.result.failures.append(ShardFailure(stage_dir, shard, part, reason, rerun_fixes))

    def _fan_out(self, ctx: dedup.PassContext, stage_dir: str) -> dedup.FanOut:
        """The pass's callback: one step's tasks on Ray, skipping those the manifest has as done."""
        import ray

        passes = self.manifest.data["stages"][stage_dir].setdefault("passes", {})

        def fan_out(name: str, step: str, ids, *args) -> dict:
            done = passes.setdefault(name, {})
            todo = deque(i for i in ids if str(i) not in done)
            total, pending = len(done) + len(todo), {}
            try:
                while todo or pending:
                    while todo and len(pending) < self.in_flight:
                        task = todo.popleft()
                        pending[self.remote_pass_task.remote(ctx, step, *args, task)] = task
                    (finished,), _ = ray.wait(list(pending), num_returns=1)
                    task = pending.pop(finished)
                    try:
                        done[str(task)] = ray.get(finished)
                    except Exception as error:
                        self.manifest.save_if_unsaved()  # the tasks done before it are not redone
                        cause = ray_task_error(error)
                        why = disk_full(cause, self.folder.root) or last_line(cause)
                        rerun_fixes = rerun_may_fix(cause) or rerun_may_fix(error)
                        raise dedup.PassFailed(f"step {name}, task {task} failed: {why}", rerun_fixes) from None
                    self.manifest.save_soon()
                    if self.on_step:
                        self.on_step(stage_dir, name, len(done), total)
            except Exception:  # a task failed, or the driver's own save: the step's other tasks stop with it
                settle(pending)
                raise
            self.manifest.save_if_unsaved()
            return done

        return fan_out

    def finish(self) -> None:
        """Free the GPU actors (a next recipe on the same Ray needs their GPUs); delete finished passes' work files
        (their stats stay), merge stage reports, write stats.json."""
        import ray

        for actor in self.actor_load:
            ray.kill(actor)
        fs, folder = self.folder.fs, self.folder
        for barrier in self.barriers:
            entry = self.manifest.data["stages"][self.stage_dirs[barrier]]
            work = folder.path(f"work/{self.stage_dirs[barrier]}")
            if "passes" in entry and all(self.done(barrier, shard) for shard in range(len(self.inputs))):
                if fs.exists(work):
                    fs.rm(work, recursive=True)
                entry["pass_stats"] = run_stats.summarize_pass(entry.pop("passes"))
                self.manifest.save()
        if fs.isdir(folder.path("work")) and not fs.ls(folder.path("work")):
            fs.rm(folder.path("work"), recursive=True)
        for index, spec in enumerate(self.recipe.stages):  # a stage's report parts as one file, e.g. OUT/decontamination.parquet
            stage_class = STAGES[spec.stage]
            reports = folder.path(f"reports/{self.stage_dirs[index + 1]}")
            if stage_class.report_name and fs.exists(reports):
                parts = [read_parquet(fs, path) for path in sorted(fs.glob(f"{reports}/part-*.parquet"))]
                merged = pa.concat_tables(parts) if parts else stage_class.report_schema.empty_table()
                write_parquet_atomic(fs, folder.path(f"{stage_class.report_name}.parquet"), merged)
        run_stats.write(fs, folder.root, self.manifest.data, self.stage_dirs)
        if not self.result.failures and not self.keep_intermediate:
            self.release_unredacted()

    def release_unredacted(self) -> None:
        """Delete the parts of every stage a later redacting stage follows, once every shard is finished: a finished
        run folder holds no secret or PII its recipe removes. The manifest keeps them as done (`released`)."""
        final = len(self.stage_dirs) - 1
        if all(self.done(final, shard) for shard in range(len(self.inputs))):
            self.result.released_stages = _release(self.folder, self.manifest, redacted_later(self.recipe) & self.writes - {final})


def redacted_later(recipe: Recipe) -> set[int]:
    """The stages with a redacting stage after them: their parts hold text it replaced."""
    last = max((i + 1 for i, spec in enumerate(recipe.stages) if STAGES[spec.stage].redacts), default=0)
    return set(range(last))  # stage 0 is the read, so recipe stage i is stage i + 1


def _release(folder: RunFolder, manifest: Manifest, stages: set[int]) -> list[str]:
    released = []
    for stage in sorted(stages):
        stage_dir = folder.stage_dirs[stage]
        if folder.fs.exists(folder.path(stage_dir)):
            folder.fs.rm(folder.path(stage_dir), recursive=True)
            released.append(stage_dir)
        manifest.data["stages"][stage_dir]["released"] = True
    manifest.save()
    return released


def release_unredacted(output: str, recipe: Recipe) -> list[str]:
    """What a finished run kept with `keep_intermediate` (an ablation's, whose variants start from its stages) releases
    once nothing reads its intermediate parts any more: the parts a later redacting stage follows, deleted and kept
    as done in the manifest. Returns the stage folders deleted."""
    folder = RunFolder(output, recipe.stage_dirs())
    manifest = Manifest(folder)
    return _release(folder, manifest, redacted_later(recipe) - {len(folder.stage_dirs) - 1})


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("ray", "pyarrow", "trafilatura", "resiliparse", "fasttext-numpy2-wheel", "datatrove"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found
