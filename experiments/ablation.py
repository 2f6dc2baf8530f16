"""`curate ablate`: curate a base recipe and its variants on one input, train the same small model on each, and compare
them on one validation set and on multiple-choice benchmarks, in one report (DCLM's and FineWeb's method, one command).

```
OUT/ablation.json                 the ablation as given; a rerun into OUT must give the same one (then it resumes)
OUT/curated/<variant>/            a `curate run` folder per variant, base included, every stage written; a variant
                                  starts from hard links to the base's stages whose chained config hash it shares, so
                                  the runner resumes after them instead of computing them again
OUT/validation/part-00000.parquet held out from the input before curation (a hash of the document id picks the
                                  extracted pages), so no filter can remove it; `tokens/` beside it
OUT/tokenizer.json                one byte-level BPE, trained on the base's curated text, for every variant
OUT/train/<variant>-seed<k>/      a `train` run per variant and seed, the base included: seed k of a variant is
                                  paired with seed k of the base
OUT/doc_losses/<run>.parquet      the run's last checkpoint's summed loss on every validation document (id, tokens,
                                  loss_sum): the paired differences the intervals resample (experiments/ablation_stats.py)
OUT/scores/<run>.json             benchmark accuracies of the run's last checkpoint, with each item's correctness
OUT/results.json, OUT/report.html
```
Every variant's own held-out rows are the validation documents that survived its filters (the same hash), so no
variant trains on them; each run is scored on the whole common set only (`validation: named` in its mixture).
"""

import json
import os
import subprocess
import time
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from curation.io import write_json_atomic, write_parquet_atomic, write_text_atomic
from curation.recipe import Recipe, RecipeError, load_recipe, parse_recipe
from curation.run_folder import MANIFEST
from curation.worker_stages import redacted
from curation.tokenize import TOKENS_DIR, curated_parts, train_tokenizer, write_tokens
from experiments.folders import LOCAL
from filters.benchmark_index import BenchmarkSpec, load_choice_items
from shard_contract import TOKENIZER_FILE, held_out

BASE = "base"
ALL, KEPT, REMOVED = "all", "kept", "removed"
SLICES = (ALL, KEPT, REMOVED)  # the validation documents; those in the base's curated output; the others
ADDED_RUNS = ("data_scaling", "ladder")  # spec fields that add runs to an ablation without changing its others
ADDED_FIELDS = {"width": None}  # what an ablation.json written before a field existed had: its default


class VariantSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[\w.-]+$")
    recipe: str | None = Field(None, description="a whole recipe (built-in name or YAML) instead of changes to the base")
    remove: list[str] = Field(default_factory=list, description="stages of the base to leave out, e.g. [quality]")
    set: dict[str, Any] = Field(default_factory=dict, description="`stage.param: value`, e.g. quality.threshold: 0.8")

    @model_validator(mode="after")
    def one_way(self) -> "VariantSpec":
        if self.recipe and (self.remove or self.set):
            raise ValueError("give a whole recipe or changes to the base (remove, set), not both")
        return self


class AblationSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base: str = Field("fineweb-snapshot", description="the base recipe: built-in name or YAML")
    variants: list[VariantSpec] = Field(min_length=1)
    tokens: int | None = Field(None, gt=0, description="training tokens per run (default: 20 per parameter, capped by "
                               "the smallest variant's training tokens times max_epochs)")  # fmt: skip
    model: str = Field("tiny", description="training preset (tiny|small|1b) or a settings YAML")
    width: int | None = Field(None, ge=8, description="train the cpu ladder rule's model of this width instead of `model` "
                              "(`train ladder`'s shape, fan-in init, peak lr 8e-3 x 64 / width, 5% warmup, shuffled "
                              "windows): the rule whose seeds agree (docs/benchmarks.md, seed noise)")  # fmt: skip
    seed: int = 0
    seeds: int = Field(3, ge=2, description="runs of every variant, the base included (seeds seed, seed+1, ...): the "
                       "seed-to-seed noise that, with the documents', sets each difference's interval")  # fmt: skip
    deciding_slice: Literal[SLICES] = Field(KEPT, description="the validation documents whose loss decides: all of "
                                            f"them, those the base recipe keeps ({KEPT}) or those it removes")  # fmt: skip
    validation_fraction: float = Field(0.05, gt=0, lt=1, description="share of the input held out for validation")
    max_epochs: float = Field(1.0, gt=0, description="no variant's tokens are repeated more often than this (default: "
                              "never; a repeated small variant would be compared on memorization)")  # fmt: skip
    eval_every: int = Field(10, gt=0, description="validation loss every N steps")
    eval_sequences: int = Field(64, gt=0, description="validation sequences scored at each validation")
    vocab_size: int = Field(4096, ge=512)
    ranks: int | None = Field(None, gt=0, description="processes per training run (default: 1 with `width`, as a ladder's "
                              "rungs; else GPUs, else 2)")  # fmt: skip
    ladder: bool = Field(False, description="also train every variant on the same small ladder (experiments.ablation_ladder): "
                         "the order of each pair at every rung, and the tokens of one variant that match another")  # fmt: skip
    data_scaling: list[float] = Field(default_factory=list, description="fractions of the token budget, e.g. [0.25, "
                                      "0.5, 2], each variant also trains on with one seed where its data allows "
                                      "(max_epochs): each variant's loss-against-tokens law on the deciding slice and "
                                      "the tokens of its data that reach the base's loss (experiments.data_scaling)")  # fmt: skip
    benchmarks: list[BenchmarkSpec] = Field(default_factory=list, description="multiple-choice benchmarks (formats "
                                            "hellaswag, arc, mmlu or your own fields with choices and answer), local files")  # fmt: skip

    @model_validator(mode="after")
    def one_model(self) -> "AblationSpec":
        if self.width is not None and "model" in self.model_fields_set:
            raise ValueError(f"give `model` ({self.model}) or `width` ({self.width}, the cpu ladder's rule), not both")
        return self

    @field_validator("data_scaling")
    @classmethod
    def distinct_fractions(cls, fractions: list[float]) -> list[float]:
        if any(f <= 0 or f == 1 for f in fractions) or len(set(fractions)) < len(fractions):
            raise ValueError(f"fractions of the budget are distinct, positive and not 1 (the budget itself): {fractions}")
        return sorted(fractions)

    @field_validator("variants")
    @classmethod
    def distinct_names(cls, variants: list[VariantSpec]) -> list[VariantSpec]:
        names = [v.name for v in variants]
        if BASE in names or len(set(names)) < len(names):
            raise ValueError(f"variant names must differ from each other and from {BASE!r}: {names}")
        return variants


def load_ablation(path: str, **overrides) -> AblationSpec:
    """An ablation YAML (or none) with CLI values on top; errors name the field."""
    data = {}
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise RecipeError(f"{path}: cannot read the ablation: {error}") from None
    data |= {key: value for key, value in overrides.items() if value is not None}
    try:
        return AblationSpec.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise RecipeError(f"{path or 'ablation'}: {where}: {first['msg']}") from None


def load_variant(path: str) -> dict:
    """A variant file: `name` plus `remove`/`set` changes, or a whole recipe (it has `stages`)."""
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a variant is a mapping (name, remove, set) or a whole recipe")
    if "stages" in data:
        return {"name": data.get("name", Path(path).stem), "recipe": path}
    return {"name": Path(path).stem} | data


def variant_recipe(base: Recipe, variant: VariantSpec) -> Recipe:
    if variant.recipe:
        return load_recipe(variant.recipe).model_copy(update={"name": variant.name})
    data = base.model_dump()
    names = [stage["stage"] for stage in data["stages"]]
    for stage in variant.remove:
        if stage not in names:
            raise RecipeError(f"variant {variant.name}: remove: {base.name} has no stage {stage!r} (it has {names})")
    data["stages"] = [stage for stage in data["stages"] if stage["stage"] not in variant.remove]
    for key, value in variant.set.items():
        stage, _, param = key.partition(".")
        matches = [spec for spec in data["stages"] if spec["stage"] == stage]
        if not param or not matches:
            raise RecipeError(f"variant {variant.name}: set.{key}: give `stage.param` of a stage the variant runs")
        matches[0]["params"][param] = value
    return parse_recipe(data | {"name": variant.name}, f"variant {variant.name}")


class Ablation:
    """The steps, each skipped when its output is there: curate, hold out, tokenize, train, score, report."""

    def __init__(self, spec: AblationSpec, out: str, inputs: list[str], snapshot: str, log=print):
        self.spec, self.out, self.inputs, self.snapshot, self.log = spec, Path(out), inputs, snapshot, log
        base = load_recipe(spec.base)
        self.recipes = {BASE: base} | {v.name: variant_recipe(base, v) for v in spec.variants}
        self.benchmarks = {b.name: load_choice_items(b) for b in spec.benchmarks}

    def curated(self, name: str) -> Path:
        return self.out / "curated" / name

    def runs(self) -> list[tuple[str, str, int]]:
        """(run name, variant, seed): every variant, the base first, at every seed."""
        seeds = range(self.spec.seed, self.spec.seed + self.spec.seeds)
        return [(f"{variant}-seed{s}", variant, s) for variant in self.recipes for s in seeds]

    def check_same_ablation(self) -> None:
        """Refuse an OUT that holds another ablation; data_scaling and ladder only add runs, so they may change."""
        record = self.out / "ablation.json"
        given = json.loads(self.spec.model_dump_json()) | {"inputs": self.inputs}
        identity = lambda spec: {key: value for key, value in (ADDED_FIELDS | spec).items() if key not in ADDED_RUNS}  # noqa: E731
        if record.is_file() and identity(json.loads(record.read_text())) != identity(given):
            raise RecipeError(f"{self.out} holds another ablation (its ablation.json differs): choose another --out")
        self.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(LOCAL, str(record), given)

    def shared(self, name: str) -> list[str]:
        return shared_stages(self.recipes[BASE], self.recipes[name], self.inputs, self.snapshot)

    def curate(self, run_recipe) -> None:
        """Every variant curated, the base first: a variant starts from the stages it shares with it."""
        for name, recipe in self.recipes.items():
            if name != BASE:
                share_stages(self.curated(BASE), self.curated(name), self.shared(name))
            self.log(f"curating {name}")
            run_recipe(recipe, self.inputs, str(self.curated(name)), self.snapshot)

    def hold_out(self) -> Path:
        """The validation documents: the extracted input pages a hash of the id holds out (every variant holds out
        the same ids when tokenizing, so none trains on them)."""
        out = self.out / "validation" / "part-00000.parquet"
        if out.is_file():
            return out
        base = self.recipes[BASE]
        text_stage = next((i + 1 for i, spec in enumerate(base.stages) if spec.stage == "extract"), 0)
        folder = self.curated(BASE) / base.stage_dirs()[text_stage]
        tables = []
        for part in sorted(folder.glob("part-*.parquet")):
            table = pq.read_table(part, columns=["id", "source", "text"])
            keep = [held_out(doc_id, self.spec.validation_fraction) and bool(text and text.strip())
                    for doc_id, text in zip(table["id"].to_pylist(), table["text"].to_pylist())]  # fmt: skip
            tables.append(table.filter(pa.array(keep, pa.bool_())))  # typed: a part of no rows gives []
        held = redacted(base, text_stage, pa.concat_tables(tables)) if tables else None  # as the curated runs redact it
        if held is None or held.num_rows == 0:
            raise ValueError(f"no validation documents held out of {folder} at fraction {self.spec.validation_fraction}")
        out.parent.mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(LOCAL, str(out), held)
        return out

    def tokenize(self, documents: Path) -> dict[str, dict]:
        """One tokenizer (trained on the base's curated text) for every variant and the validation set."""
        from tokenizers import Tokenizer

        path = self.out / TOKENIZER_FILE
        if path.is_file():
            tokenizer = Tokenizer.from_file(str(path))
        else:
            texts = (text for part in curated_parts(str(self.curated(BASE)))
                     for text in pq.read_table(part, columns=["text"])["text"].to_pylist())  # fmt: skip
            tokenizer = train_tokenizer(texts, self.spec.vocab_size)
            write_text_atomic(LOCAL, str(path), tokenizer.to_str())
        stats = {}
        for name in self.recipes:
            folder = self.curated(name)
            stats[name] = read_token_stats(folder) if tokens_done(folder) else write_tokens(
                str(folder), curated_parts(str(folder)), tokenizer, self.spec.validation_fraction)
        if not tokens_done(documents.parent):
            write_tokens(str(documents.parent), [str(documents)], tokenizer, 0.0)
        self.release_unredacted()
        return stats

    def release_unredacted(self) -> None:
        """Once every variant is tokenized nothing reads their intermediate parts: those a later redacting stage
        follows (kept so variants could start from the base's stages) are deleted, as `curate run` deletes its own."""
        from curation.runner import release_unredacted

        for name, recipe in self.recipes.items():
            released = release_unredacted(str(self.curated(name)), recipe)
            if released:
                self.log(f"{name}: deleted the parts of {', '.join(released)}: they hold text a later stage redacts")

    def budget(self, token_stats: dict[str, dict]) -> tuple[int, int, str]:
        """(tokens, steps, why): the given tokens, else 20 per parameter, capped so no variant repeats its training
        tokens more than max_epochs times."""
        import torch

        from training.model import Transformer
        from training.plan import CHINCHILLA_TOKENS_PER_PARAM

        config = self.train_config(1)
        with torch.device("meta"):
            params = Transformer(config.model_config_for(self.spec.vocab_size)).num_params()
        trainable = {name: sum(s["tokens"] - s["validation_tokens"] for s in stats["sources"].values())
                     for name, stats in token_stats.items()}  # fmt: skip
        smallest = min(trainable, key=trainable.get)
        cap = int(trainable[smallest] * self.spec.max_epochs)
        if self.spec.tokens:
            tokens, why = self.spec.tokens, "given"
        elif CHINCHILLA_TOKENS_PER_PARAM * params <= cap:
            tokens = CHINCHILLA_TOKENS_PER_PARAM * params
            why = f"Chinchilla: {CHINCHILLA_TOKENS_PER_PARAM} x {params:,} parameters"
        else:
            tokens, why = cap, (f"capped: {smallest} has {trainable[smallest]:,} training tokens x {self.spec.max_epochs:g} "
                                f"epochs (Chinchilla would be {CHINCHILLA_TOKENS_PER_PARAM * params:,})")  # fmt: skip
        validation = sum(s["tokens"] for s in read_token_stats(self.out / "validation")["sources"].values())
        if validation <= config.seq_len:
            raise ValueError(f"the validation documents hold {validation:,} tokens, less than one sequence of "
                             f"{config.seq_len}: raise validation_fraction ({self.spec.validation_fraction})")  # fmt: skip
        per_step = config.base_shape().tokens_per_step
        return tokens, max(1, tokens // per_step), why

    def ladders(self, documents: Path, token_stats: dict[str, dict]) -> dict:
        """Every variant on the same small ladder, its budgets what the smallest variant's data allows."""
        from tokenizers import Tokenizer

        from experiments.ablation_ladder import run_ladders

        trainable = min(sum(s["tokens"] - s["validation_tokens"] for s in stats["sources"].values())
                        for stats in token_stats.values())  # fmt: skip
        vocab = Tokenizer.from_file(str(self.out / TOKENIZER_FILE)).get_vocab_size()
        deciding = self.deciding_documents(documents)
        mixtures = {name: self.mixture(name, deciding, f"ladder-{name}") for name in self.recipes}
        return run_ladders(self.out, mixtures, trainable, vocab, self.spec.max_epochs, self.log) | {
            "validated_on": self.spec.deciding_slice}

    def data_scaling(self, steps: int, token_stats: dict[str, dict], documents: Path, losses: dict[str, pa.Table],
                     slices: dict[str, np.ndarray]) -> dict:  # fmt: skip
        """Every variant also trained, seed `seed`, on each fraction of the budget its data allows; the laws of
        loss against tokens on the deciding slice and the tokens each variant needs to match the base."""
        from experiments.data_scaling import compare

        per_step = self.train_config(1).base_shape().tokens_per_step
        mask, losses = slices[self.spec.deciding_slice], dict(losses)
        points = {}
        for variant, stats in token_stats.items():
            cap = sum(s["tokens"] - s["validation_tokens"] for s in stats["sources"].values()) * self.spec.max_epochs
            names = [run for run, name, _ in self.runs() if name == variant]
            entries = [{"tokens": steps * per_step, "runs": names}]
            for fraction in self.spec.data_scaling:
                scaled = max(1, round(steps * fraction))
                if scaled * per_step > cap:
                    self.log(f"data scaling: {variant} has {cap:,.0f} training tokens, not {scaled * per_step:,} (x{fraction:g})")
                    continue
                run = f"{variant}-x{fraction:g}-seed{self.spec.seed}"
                folder = self.train(run, variant, self.spec.seed, scaled, documents)
                losses[run] = self.doc_losses(run, folder, documents)
                entries.append({"tokens": scaled * per_step, "runs": [run]})
            for entry in entries:
                entry["sums"] = np.stack([losses[run]["loss_sum"].to_numpy()[mask] for run in entry["runs"]])
            points[variant] = sorted(entries, key=lambda entry: entry["tokens"])
        tokens = losses[next(iter(losses))]["tokens"].to_numpy().astype(np.float64)[mask]
        return compare(points, tokens, steps * per_step, BASE) | {"validated_on": self.spec.deciding_slice}

    def deciding_documents(self, documents: Path) -> Path:
        """The validation tokens of the deciding slice only (OUT/validation-<slice>/tokens), so a ladder rung's
        validation loss, and the laws fitted to it, measure what the ablation decides on."""
        if self.spec.deciding_slice == ALL:
            return documents
        out = self.out / f"validation-{self.spec.deciding_slice}" / TOKENS_DIR / documents.name
        if not out.is_file():
            table = pq.read_table(documents.parent / TOKENS_DIR / documents.name)
            mask = self.slices(table["id"].to_pylist())[self.spec.deciding_slice]
            if not mask.any():
                raise ValueError(f"no validation document is in the deciding slice {self.spec.deciding_slice!r}")
            out.parent.mkdir(parents=True, exist_ok=True)
            write_parquet_atomic(LOCAL, str(out), table.filter(pa.array(mask)))
        return out.parent.parent / documents.name

    def mixture(self, variant: str, documents: Path, name: str | None = None) -> Path:
        path = self.out / "mixtures" / f"{name or variant}.yaml"
        mixture = {
            "name": f"ablation-{name or variant}",
            "sources": {"web": {
                "paths": [str(self.curated(variant).resolve() / TOKENS_DIR / "part-*.parquet")],
                "validation_paths": [str(documents.parent.resolve() / TOKENS_DIR / "part-*.parquet")],
                "validation": "named", "max_epochs": self.spec.max_epochs,
            }},
        }  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(LOCAL, str(path), yaml.safe_dump(mixture, sort_keys=False))
        return path

    def rule_settings(self, steps: int) -> dict | None:
        """With `width`: the cpu ladder rule's `train` settings of that width for `steps` steps; else None."""
        if self.spec.width is None:
            return None
        from experiments.ladder import PRESETS, LadderSpec, rung_settings

        return rung_settings(LadderSpec(**PRESETS["cpu"]), self.spec.width, steps, self.ranks())

    def config_argument(self, steps: int) -> str:
        """`train --config` of a run of `steps` steps: the spec's model, or the ladder rule's settings file."""
        from experiments.ladder import write_settings

        settings = self.rule_settings(steps)
        if settings is None:
            return self.spec.model
        return str(write_settings(self.out / "configs" / f"w{self.spec.width}-{steps}-steps.yaml", settings))

    def model_name(self) -> str:
        return self.spec.model if self.spec.width is None else f"width {self.spec.width} by the cpu ladder's rule"

    def ranks(self) -> int | None:
        return self.spec.ranks or (1 if self.spec.width else None)

    def train_config(self, steps: int):
        from training.config import TrainConfig, load_config

        settings = self.rule_settings(steps)
        return load_config(self.spec.model) if settings is None else TrainConfig(**settings)

    def train(self, run: str, variant: str, seed: int, steps: int, documents: Path) -> Path:
        from training import checkpoint

        folder = self.out / "train" / run
        latest = checkpoint.latest(folder / "checkpoints")
        if latest is not None and latest.name == f"step-{steps:08d}":
            return folder
        command = [sys.executable, "-m", "training", "--mixture", str(self.mixture(variant, documents)), "--config",
                   self.config_argument(steps), "--steps", str(steps), "--seed", str(seed), "--out", str(folder),
                   "--eval-every", str(self.spec.eval_every), "--eval-sequences", str(self.spec.eval_sequences),
                   "--checkpoint-every", str(max(1, steps // 4)), "--resume"]  # fmt: skip
        if self.ranks():
            command += ["--ranks", str(self.ranks())]
        log = self.out / "train" / f"{run}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log(f"training {run}: {steps} steps (log: {log})")
        with log.open("a") as handle:
            code = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT).returncode
        if code:
            raise RuntimeError(f"training {run} failed (exit {code}); the end of {log}:\n{log.read_text()[-3000:]}")
        return folder

    def doc_losses(self, run: str, folder: Path, documents: Path) -> pa.Table:
        """The run's loss on every validation document, written once (OUT/doc_losses/<run>.parquet)."""
        path = self.out / "doc_losses" / f"{run}.parquet"
        if path.is_file():
            return pq.read_table(path)
        from training.doc_losses import score_documents

        table = pq.read_table(documents.parent / TOKENS_DIR / documents.name, columns=["id", "tokens"])
        self.log(f"scoring {run} on {table.num_rows:,} validation documents")
        losses = score_documents(folder, table["id"].to_pylist(), table["tokens"].to_pylist(), self.train_config(1).seq_len)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(LOCAL, str(path), losses)
        return losses

    def slices(self, ids: list[str]) -> dict[str, np.ndarray]:
        """Each slice's mask over the validation documents: all; those the base recipe keeps (they are in its final
        stage: curation ran on every page, the hash holds them out of training only); those it removes."""
        kept_ids = {doc_id for part in curated_parts(str(self.curated(BASE)))
                    for doc_id in pq.read_table(part, columns=["id"])["id"].to_pylist()}  # fmt: skip
        kept = np.array([doc_id in kept_ids for doc_id in ids], dtype=bool)
        return {ALL: np.ones(len(ids), dtype=bool), KEPT: kept, REMOVED: ~kept}

    def score(self, run: str, folder: Path) -> dict:
        return scores_once(self.out / "scores" / f"{run}.json", folder, self.benchmarks)


def scores_once(path: Path, folder: Path, benchmarks: dict[str, list]) -> dict:
    """A training run's benchmark scores, each item's kept, written to `path` once: a rerun reads them back."""
    if path.is_file():
        return json.loads(path.read_text())
    from training.choices import score_run

    scores = {name: asdict(result) for name, result in score_run(folder, benchmarks).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(LOCAL, str(path), scores)
    return scores


def shared_stages(base: Recipe, recipe: Recipe, inputs: list[str], snapshot: str) -> list[str]:
    """The stage folders a variant shares with the base: the same name and chained config hash, from the start."""
    shared = []
    ours, theirs = base.stage_hashes(inputs, snapshot), recipe.stage_hashes(inputs, snapshot)
    for stage, other, stage_hash, other_hash in zip(base.stage_dirs(), recipe.stage_dirs(), ours, theirs):
        if (stage, stage_hash) != (other, other_hash):
            break
        shared.append(stage)
    return shared


def share_stages(base_dir: Path, variant_dir: Path, shared: list[str]) -> None:
    """Start a new variant folder from the base's shared stages, as hard links with their manifest entries: the
    runner then resumes after them instead of computing them again."""
    if (variant_dir / MANIFEST).is_file() or not (base_dir / MANIFEST).is_file():
        return
    done = json.loads((base_dir / MANIFEST).read_text())
    shared = [stage for stage in shared if stage in done["stages"]]
    for stage in shared:
        for where in ("", "removed/", "reports/"):
            source = base_dir / f"{where}{stage}"
            for file in sorted(source.rglob("*")) if source.is_dir() else []:
                if file.is_file() and not file.name.endswith(".tmp"):
                    target = variant_dir / file.relative_to(base_dir)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.link(file, target)
    manifest = {key: value for key, value in done.items() if key != "stages"}
    manifest["stages"] = {stage: done["stages"][stage] for stage in shared}
    variant_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(LOCAL, str(variant_dir / MANIFEST), manifest)


def run_ablation(ablation: Ablation, run_recipe) -> dict:
    """Every step (each resumed where its output is there), then OUT/results.json and OUT/report.html."""
    from experiments.ablation_report import render

    started = time.perf_counter()
    ablation.check_same_ablation()
    ablation.curate(run_recipe)
    documents = ablation.hold_out()
    token_stats = ablation.tokenize(documents)
    tokens, steps, why = ablation.budget(token_stats)
    ablation.log(f"budget: {tokens:,} tokens, {steps} steps per run ({why})")
    runs, losses, scores = {}, {}, {}
    for run, variant, seed in ablation.runs():
        folder = ablation.train(run, variant, seed, steps, documents)
        losses[run] = ablation.doc_losses(run, folder, documents)
        scores[run] = ablation.score(run, folder) if ablation.benchmarks else {}
        runs[run] = run_summary(folder, variant, seed) | {"benchmarks": {
            name: {key: value for key, value in score.items() if key != "item_correct"} for name, score in scores[run].items()}}  # fmt: skip
    validation = read_token_stats(documents.parent)["sources"]
    slices = ablation.slices(losses[next(iter(losses))]["id"].to_pylist())
    tokens_per_doc = losses[next(iter(losses))]["tokens"].to_numpy()
    results = {
        "base": ablation.spec.base, "model": ablation.model_name(), "inputs": len(ablation.inputs),
        "budget": {"tokens": tokens, "steps": steps, "why": why},
        "seeds": list(range(ablation.spec.seed, ablation.spec.seed + ablation.spec.seeds)),
        "validation": {key: sum(s[key] for s in validation.values()) for key in ("documents", "tokens")},
        "slices": {name: {"documents": int(mask.sum()), "tokens": int(tokens_per_doc[mask].sum())} for name, mask in slices.items()},
        "deciding_slice": ablation.spec.deciding_slice,
        "variants": {name: variant_summary(ablation.curated(name), ablation.recipes[name], token_stats[name],
                                           ablation.shared(name) if name != BASE else []) for name in ablation.recipes},
        "runs": runs,
    }  # fmt: skip
    results |= compare(runs, losses, slices, scores, ablation.spec.deciding_slice)
    if ablation.spec.data_scaling:
        results["data_scaling"] = ablation.data_scaling(steps, token_stats, documents, losses, slices)
    if ablation.spec.ladder:
        results["ladder"] = ablation.ladders(documents, token_stats)
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    write_json_atomic(LOCAL, str(ablation.out / "results.json"), results)
    write_text_atomic(LOCAL, str(ablation.out / "report.html"), render(results, ablation.out))
    return results


def tokens_done(folder: Path) -> bool:
    """`write_tokens` writes stats.json last: it marks a folder whose tokens are all written."""
    return (folder / TOKENS_DIR / "stats.json").is_file()


def read_token_stats(folder: Path) -> dict:
    return json.loads((folder / TOKENS_DIR / "stats.json").read_text())


def run_summary(folder: Path, variant: str, seed: int) -> dict:
    """A training run's validation-loss curve and final value, from its metrics.jsonl."""
    from training import metrics

    frame = metrics.load(str(folder))
    validated = frame[frame.val_loss.notna()] if "val_loss" in frame.columns else frame.iloc[0:0]
    curve = [[int(step), float(loss)] for step, loss in zip(validated.step, validated.val_loss)]
    return {"variant": variant, "seed": seed, "folder": str(folder), "val_loss": curve[-1][1] if curve else None, "curve": curve}


def variant_summary(folder: Path, recipe: Recipe, token_stats: dict, shared: list[str]) -> dict:
    from curation import stats

    funnel = stats.funnel(stats.load(str(folder)))
    return {
        "stages": [spec.stage for spec in recipe.stages],
        "funnel": [{"stage": stage, "docs_in": int(row.docs_in), "docs_out": int(row.docs_out)} for stage, row in funnel.iterrows()],
        "documents": sum(s["documents"] for s in token_stats["sources"].values()),
        "training_tokens": sum(s["tokens"] - s["validation_tokens"] for s in token_stats["sources"].values()),
        "shared_with_base": shared,
    }  # fmt: skip


def compare(runs: dict[str, dict], losses: dict[str, pa.Table], slices: dict[str, np.ndarray], scores: dict[str, dict],
            deciding: str) -> dict:  # fmt: skip
    """Each variant against the base, seed k against seed k: the validation loss (per token, over each slice's
    documents) and benchmark accuracy of every variant, and of each difference from the base its 95% interval over
    seeds and documents (or items). A loss difference is resolved when its interval on the deciding slice excludes
    zero; an accuracy difference is called only when, besides, neither side is at chance."""
    from experiments.ablation_stats import at_chance, documents_to_resolve, paired_interval

    seeded = {}
    for name, run in runs.items():
        seeded.setdefault(run["variant"], []).append(name)
    ids = losses[seeded[BASE][0]]["id"].to_pylist()
    if any(table["id"].to_pylist() != ids for table in losses.values()):
        raise ValueError("the runs' doc_losses/*.parquet score different validation documents: remove OUT/doc_losses")
    if not slices[deciding].any():
        raise ValueError(f"deciding_slice {deciding!r} holds no validation document: choose another")
    tokens = losses[seeded[BASE][0]]["tokens"].to_numpy().astype(np.float64)
    sums = {variant: np.stack([losses[run]["loss_sum"].to_numpy() for run in names]) for variant, names in seeded.items()}
    shown = {name: mask for name, mask in slices.items() if mask.any()}
    loss = {variant: {name: float(table[:, mask].sum() / tokens[mask].sum() / len(table)) for name, mask in shown.items()}
            for variant, table in sums.items()}  # fmt: skip
    accuracy, correct = {}, {}
    for variant, names in seeded.items():
        for benchmark in scores[names[0]]:
            correct[variant, benchmark] = np.array([scores[run][benchmark]["item_correct"] for run in names])
            items, chance = correct[variant, benchmark].shape[1], scores[names[0]][benchmark]["chance"]
            acc = float(correct[variant, benchmark].mean())
            accuracy.setdefault(variant, {})[benchmark] = {
                "acc": acc, "chance": chance, "items": items, "at_chance": at_chance(round(acc * items), items, chance),
                "per_seed": [scores[run][benchmark]["acc"] for run in names]}  # fmt: skip
    comparison = {}
    for variant in seeded:
        if variant == BASE:
            continue
        found = {name: paired_interval(sums[variant][:, mask], sums[BASE][:, mask], tokens[mask]) for name, mask in shown.items()}
        intervals = {name: interval.to_json() for name, interval in found.items()}
        benchmarks = {}
        for benchmark, mine in accuracy.get(variant, {}).items():
            interval = paired_interval(correct[variant, benchmark], correct[BASE, benchmark],
                                       np.ones(mine["items"])).to_json()  # fmt: skip
            either_at_chance = mine["at_chance"] or accuracy[BASE][benchmark]["at_chance"]
            benchmarks[benchmark] = interval | {"called": interval["resolved"] and not either_at_chance}
        comparison[variant] = {"val_loss": intervals, "resolved": intervals[deciding]["resolved"], "benchmarks": benchmarks,
                               "documents_to_resolve": documents_to_resolve(found[deciding], int(shown[deciding].sum()))}  # fmt: skip
    return {"loss": loss, "accuracy": accuracy, "comparison": comparison}
