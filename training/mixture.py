"""Mixture YAML: named sources of token shards with weights by tokens, in phases (which may also change the sequence
length and RoPE, for context extension), and an optional batch-size ramp. Validated at load."""

import fnmatch
import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from training import storage
from shard_contract import PART_STATS_DIR, SHARDS_KEY, STATS_FILE, TOKENIZER_FILE


class MixtureError(ValueError):
    pass


class SourceFilter(BaseModel):
    """Rows of the token shards to use, by a column tokenization kept (e.g. the `bucket` of quality_buckets)."""

    model_config = ConfigDict(extra="forbid")
    column: str
    equals: str | int | bool | None = None
    min: float | None = None
    max: float | None = None


class SourceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paths: list[str] = Field(min_length=1, description="globs of token shards, relative to the working directory")
    weight: float = Field(
        1.0, gt=0, description="the weight of the default single phase; the sources' weights must sum to 1 when any is "
        "given (none given: equal shares)",
    )  # fmt: skip
    where: SourceFilter | None = Field(None, description="only the documents whose column matches, e.g. a quality bucket")
    max_epochs: float = Field(4.0, gt=0, description="`train plan` and `train` refuse a mixture that repeats it more")
    validation_paths: list[str] = Field(
        default_factory=list, description="globs of held-out token shards of this source, validated on and never trained "
        "on; added to the rows `curate tokenize` held out (`split` column)",
    )  # fmt: skip
    validation: Literal["both", "named"] = Field(
        "both", description="what the source is validated on: both the rows `curate tokenize` held out and the "
        "validation_paths shards, or only the named shards (the held-out rows are still never trained on): runs on "
        "differently filtered data (`curate ablate`) are then scored on one common set",
    )  # fmt: skip

    @model_validator(mode="after")
    def named_validation_has_paths(self) -> "SourceSpec":
        if self.validation == "named" and not self.validation_paths:
            raise ValueError("validation: named needs validation_paths")
        return self


class RopeScaling(BaseModel):
    """Position interpolation (`linear`: every frequency divided by `factor`) or YaRN (low frequencies interpolated,
    high ones kept, attention sharpened), as Hugging Face computes them."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["linear", "yarn"]
    factor: float = Field(gt=1)
    original_seq_len: int | None = Field(None, gt=0, description="yarn: the length trained at before; default: the "
                                         "previous phase's seq_len")  # fmt: skip
    beta_fast: float = Field(32, gt=0)
    beta_slow: float = Field(1, gt=0)


@dataclass(frozen=True)
class PhaseShape:
    """What a phase trains with beyond its weights: sequences, batch and RoPE (inherited from the phase before)."""

    seq_len: int
    global_batch: int
    micro_batch: int
    rope_theta: float
    rope_scaling: dict | None = None

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch

    @property
    def rope(self) -> str:
        """The RoPE in words, for logs and `train plan`."""
        scaling = f", {self.rope_scaling['kind']} x{self.rope_scaling['factor']:g}" if self.rope_scaling else ""
        return f"theta {self.rope_theta:g}{scaling}"


class Phase(BaseModel):
    """A curriculum phase: its source weights for `tokens` tokens, or a `fraction` of the run; the last phase may
    leave both out and takes what remains."""

    model_config = ConfigDict(extra="forbid")
    name: str
    weights: dict[str, float]
    tokens: int | None = Field(None, gt=0, description="tokens trained on in this phase, at its own tokens per step")
    fraction: float | None = Field(None, gt=0, le=1, description="share of the run's nominal tokens (steps x the "
                                   "config's tokens per step)")  # fmt: skip
    seq_len: int | None = Field(None, gt=0, description="context extension: the sequence length from this phase on")
    global_batch: int | None = Field(None, gt=0, description="sequences per step from this phase on")
    micro_batch: int | None = Field(None, gt=0, description="sequences per rank per forward from this phase on")
    rope_theta: float | None = Field(None, gt=0, description="a new RoPE base from this phase on (e.g. 500000)")
    rope_scaling: RopeScaling | None = None


class BatchRamp(BaseModel):
    """Grow the global batch over the run's first `tokens` tokens, from `start` of it to all of it by doublings
    (GPT-3 grew its batch over the first 4-12B tokens; OLMo 2 and DeepSeek-V3 ramp too): the tokens are split evenly
    over the smaller batches, each trains whole steps, and the full batch follows. Step boundaries come from token
    counts alone, so the same run on any rank count (that divides the smallest batch) draws the same sequences."""

    model_config = ConfigDict(extra="forbid")
    start: float = Field(gt=0, lt=1, description="the first batch as a share of the full one: 1/2, 1/4, 1/8, ...")
    tokens: int = Field(gt=0, description="tokens over which the batch grows to full")

    @model_validator(mode="after")
    def start_is_a_halving(self):
        halvings = math.log2(1 / self.start)
        if not math.isclose(halvings, round(halvings)):
            raise ValueError(f"batch_ramp.start {self.start:g} is not 1/2, 1/4, 1/8, ... (the batch grows by doublings)")
        return self

    def stages(self, shape: "PhaseShape") -> list[tuple[int, int]]:
        """(first step, batch divisor) of each smaller batch, then (the ramp's last step + 1, 1)."""
        halvings = round(math.log2(1 / self.start))
        starts, step = [], 0
        for divisor in (2**k for k in range(halvings, 0, -1)):
            starts.append((step, divisor))
            step += -(-self.tokens // halvings // (shape.seq_len * (shape.global_batch // divisor)))
        return starts + [(step, 1)]


class Mixture(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    tokenizer: str | None = Field(None, description="tokenizer.json; default: the one beside the first source's shards")
    sources: dict[str, SourceSpec] = Field(min_length=1)
    phases: list[Phase] = Field(default_factory=list)
    batch_ramp: BatchRamp | None = Field(None, description="grow the first phase's global batch over its first tokens")

    @model_validator(mode="after")
    def phases_name_known_sources(self):
        if not self.phases:
            given = any("weight" in source.model_fields_set for source in self.sources.values())
            total = sum(source.weight for source in self.sources.values())
            if given and not math.isclose(total, 1.0, abs_tol=1e-6):
                raise ValueError(f"sources' weights sum to {total:g}, not 1: a mixture is never normalized silently")
            weights = {name: source.weight / total for name, source in self.sources.items()}
            self.phases = [Phase(name="main", weights=weights)]
        for index, phase in enumerate(self.phases):
            unknown = sorted(set(phase.weights) - set(self.sources))
            if unknown:
                raise ValueError(f"phases[{index}].weights names unknown sources {unknown}")
            if any(w < 0 for w in phase.weights.values()):
                raise ValueError(f"phases[{index}].weights must be >= 0")
            if not math.isclose(sum(phase.weights.values()), 1.0, abs_tol=1e-6):
                total = sum(phase.weights.values())
                raise ValueError(f"phases[{index}].weights sum to {total:g}, not 1: a mixture is never normalized silently")
            if phase.tokens is not None and phase.fraction is not None:
                raise ValueError(f"phases[{index}]: give tokens or fraction, not both")
            if phase.tokens is None and phase.fraction is None and index < len(self.phases) - 1:
                raise ValueError(f"phases[{index}]: every phase but the last needs tokens or fraction")
        return self

    def phase_starts(self, total_tokens: int) -> list[int]:
        """The token count at which each phase begins, for a run of `total_tokens`."""
        starts, position = [], 0
        for phase in self.phases:
            starts.append(position)
            position += phase.tokens if phase.tokens is not None else round((phase.fraction or 0) * total_tokens)
        return starts

    def shapes(self, base: PhaseShape) -> list[PhaseShape]:
        """Each phase's shape: what it sets, else the previous phase's, starting from the training config's `base`."""
        shapes, current = [], base
        for phase in self.phases:
            changes = {key: getattr(phase, key) for key in ("seq_len", "global_batch", "micro_batch", "rope_theta")
                       if getattr(phase, key) is not None}  # fmt: skip
            if phase.rope_scaling is not None:
                scaling = phase.rope_scaling.model_dump()
                scaling["original_seq_len"] = scaling["original_seq_len"] or current.seq_len
                changes["rope_scaling"] = scaling
            current = replace(current, **changes)
            shapes.append(current)
        return shapes

    def ramp_stages(self, base: PhaseShape) -> list[tuple[int, int]]:
        """(first step, batch divisor) of the batch ramp's stages, ending with (its end, 1); [(0, 1)] without one."""
        return self.batch_ramp.stages(self.shapes(base)[0]) if self.batch_ramp else [(0, 1)]

    def step_shape(self, shape: PhaseShape, step: int, stages: list[tuple[int, int]]) -> PhaseShape:
        """`shape` (the step's phase's) with the global batch the ramp gives step `step`."""
        divisor = next(d for first, d in reversed(stages) if first <= step)
        return shape if divisor == 1 else replace(shape, global_batch=shape.global_batch // divisor)

    def phase_start_steps(self, total_steps: int, base: PhaseShape) -> list[int]:
        """The step at which each phase begins. A phase ends once the tokens trained reach the nominal token count
        at which the next begins (`phase_starts` of steps x the base tokens per step), each step counting its own
        phase's tokens (and the batch ramp's), so a longer-context phase reaches its budget in fewer steps."""
        nominal = self.phase_starts(total_steps * base.tokens_per_step)
        stages, ramp_end = self.ramp_stages(base), self.ramp_stages(base)[-1][0]
        starts, step, done = [0], 0, 0
        for shape, end in zip(self.shapes(base), nominal[1:]):
            while step < ramp_end and done < end:  # the ramp's steps one by one, then whole runs of full steps
                done += self.steps_tokens(shape, step, step + 1, stages)
                step += 1
            steps = max(0, -(-(end - done) // shape.tokens_per_step))
            step, done = step + steps, done + steps * shape.tokens_per_step
            starts.append(step)
        return starts

    def scheduled_phase_tokens(self, total_steps: int, base: PhaseShape) -> list[int]:
        """Tokens each phase trains on in a run of `total_steps`, at its own sequence length and batch (ramped)."""
        starts = [min(start, total_steps) for start in self.phase_start_steps(total_steps, base)] + [total_steps]
        stages = self.ramp_stages(base)
        return [self.steps_tokens(shape, start, end, stages) for shape, start, end in zip(self.shapes(base), starts, starts[1:])]

    def steps_tokens(self, shape: PhaseShape, start: int, end: int, stages) -> int:
        """Tokens of steps [start, end) of a phase of `shape`: the ramp's steps at their own batch, the rest full."""
        ramp_end = stages[-1][0]
        return (sum(self.step_shape(shape, step, stages).tokens_per_step for step in range(start, min(end, ramp_end)))
                + max(0, end - max(start, ramp_end)) * shape.tokens_per_step)  # fmt: skip

    def source_names(self) -> list[str]:
        return list(self.sources)

    def weights(self, phase: int = 0) -> list[float]:
        """Normalized weights of phase `phase`, in source order."""
        raw = [self.phases[phase].weights.get(name, 0.0) for name in self.sources]
        return [w / sum(raw) for w in raw]

    def shard_files(self, name: str) -> list[str]:
        files = _matches(self.sources[name].paths)
        if not files:
            raise MixtureError(
                f"mixture {self.name!r}: source {name!r} has no token shards at {self.sources[name].paths}; "
                "curate and tokenize it first (`curate run ...`, `curate tokenize RUN_DIR`)"
            )
        return files

    def validation_files(self, name: str) -> list[str]:
        """The held-out shards a source names (`validation_paths`), none when it names none."""
        return _matches(self.sources[name].validation_paths)

    def check_one_tokenizer(self) -> None:
        """Every source whose shards have a tokenizer.json beside them was tokenized with the mixture's tokenizer."""
        expected = json.loads(storage.read_text(self.tokenizer_path()))  # parsed: formatting differs between writers
        for name in self.source_names():
            beside = storage.sibling(self.shard_files(name)[0], TOKENIZER_FILE)
            if storage.is_file(beside) and json.loads(storage.read_text(beside)) != expected:
                raise MixtureError(
                    f"mixture {self.name!r}: source {name!r} was tokenized with {beside}, not {self.tokenizer_path()}; "
                    f"tokenize its run again with `curate tokenize RUN_DIR --tokenizer {self.tokenizer_path()}`"
                )

    def check_shards_intact(self) -> None:
        """Every shard (training and validation) whose folder's stats.json records digests has the bytes and sha256
        `curate tokenize` wrote, and that folder holds no shard it did not write: a shard changed, truncated or
        half-copied on shared storage is refused by name before anything trains. Shards are hashed on several
        threads (hashlib and fsspec reads release the GIL). A folder with `curate tokenize`'s parts/ but no stats.json
        is a run that did not finish (killed, or a part failed) and is refused. Other folders without digests (written
        by hand or by an older `curate tokenize`) are not checked."""
        checked, digests = [], {}  # digests: per stats.json, read once
        for name in self.source_names():
            files = self.shard_files(name) + self.validation_files(name)
            for path in files:
                stats_path = storage.sibling(path, STATS_FILE)
                if stats_path not in digests:
                    if not storage.is_file(stats_path) and storage.is_dir(storage.sibling(path, PART_STATS_DIR)):
                        raise MixtureError(f"mixture {self.name!r}: {path.rsplit('/', 1)[0]}: `curate tokenize` did not "
                                           "finish here: rerun it")  # fmt: skip
                    digests[stats_path] = json.loads(storage.read_text(stats_path)).get(SHARDS_KEY) if storage.is_file(stats_path) else None
            self._check_complete(name, set(files), digests)
            for path in files:
                stats_path = storage.sibling(path, STATS_FILE)
                recorded = digests[stats_path]
                if recorded is None:
                    continue
                shard = path.rsplit("/", 1)[-1]
                if shard not in recorded:
                    raise MixtureError(f"mixture {self.name!r}: token shard {path} is not in {stats_path}: the last "
                                       "`curate tokenize` of that folder did not write it (a stale or foreign shard): remove it")  # fmt: skip
                checked.append((path, stats_path, recorded[shard]))
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            found = list(pool.map(storage.digest, [path for path, _, _ in checked]))
        for (path, stats_path, expected), (size, sha256) in zip(checked, found):
            if (size, sha256) != (expected["bytes"], expected["sha256"]):
                raise MixtureError(f"mixture {self.name!r}: token shard {path} changed after `curate tokenize` "
                                   f"({size:,} bytes, sha256 {sha256[:12]}; {stats_path} records {expected['bytes']:,} "
                                   f"bytes, {expected['sha256'][:12]}): copy it again or tokenize again "
                                   f"(`curate tokenize {_run_of(path)}` redoes it)")  # fmt: skip

    def _check_complete(self, name: str, found: set[str], digests: dict[str, dict | None]) -> None:
        """Every shard a folder's stats.json lists (`digests`, per stats.json) that the source's patterns select is
        among the `found` files: a part deleted or not yet copied would otherwise train on less than `curate tokenize`
        wrote, without a word."""
        patterns = self.sources[name].paths + self.sources[name].validation_paths
        for stats_path in sorted({storage.sibling(path, STATS_FILE) for path in found}):
            listed = digests[stats_path] or {}
            wanted = [storage.sibling(stats_path, shard) for shard in sorted(listed)]
            missing = [path for path in wanted if path not in found and any(fnmatch.fnmatchcase(path, p) for p in patterns)]
            if missing:
                shown = ", ".join(path.rsplit("/", 1)[-1] for path in missing[:5]) + (" ..." if len(missing) > 5 else "")
                raise MixtureError(f"mixture {self.name!r}: source {name!r}: {len(missing)} of the {len(listed)} token "
                                   f"shards {stats_path} lists are missing ({shown}): copy them back, or run "
                                   f"`curate tokenize {_run_of(stats_path)}` to write them again")  # fmt: skip

    def tokenizer_path(self) -> str:
        if self.tokenizer:
            return self.tokenizer
        return storage.sibling(self.shard_files(self.source_names()[0])[0], TOKENIZER_FILE)


def _run_of(path: str) -> str:
    """The `curate run` folder of a file in its tokens/ folder."""
    return path.rsplit("/", 2)[0] if path.count("/") >= 2 else "RUN_DIR"


def _matches(patterns: list[str]) -> list[str]:
    return sorted({path for pattern in patterns for path in storage.glob(pattern)})


def load_mixture(path: str) -> Mixture:
    file = Path(path)
    if not file.is_file():
        raise MixtureError(f"mixture file not found: {path}")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as error:
        raise MixtureError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise MixtureError(f"{path}: a mixture is a mapping with `name` and `sources`")
    try:
        return Mixture.model_validate(data)
    except ValidationError as error:
        lines = [f"  {'.'.join(str(p) for p in item['loc']) or '(mixture)'}: {item['msg']}" for item in error.errors()]
        raise MixtureError(f"{path}: invalid mixture\n" + "\n".join(lines)) from None
