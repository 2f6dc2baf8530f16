"""`curate decide`: train the same ladder of model sizes on several data recipes and measure how often the smaller
sizes' ranking of two recipes holds at the largest one (DataDecide's decision accuracy), per metric.

```
OUT/decision.json              the spec as given; a rerun into OUT must give the same one (then it resumes)
OUT/curated/<name>/            a `curate run` folder per curated input (its tokens in tokens/)
OUT/target/part-00000.parquet  the target documents: held out of the target inputs by a hash of their id, read
                               before any curation; every curated run holds the same ids out of its training tokens
OUT/tokenizer.json             one byte-level BPE for every recipe, trained on a sample of every curated run
OUT/mixtures/<recipe>.yaml     a recipe: its curated runs' tokens in its weights, scored on the target tokens
OUT/train/<recipe>-seed<k>/    `train ladder`'s folders (configs/, runs/, results/) of one recipe and seed: a rung per
                               scale, trained by the ladder's shape and lr rules; a killed rung resumes
OUT/doc_losses/<run>.parquet   a run's summed loss on every target document
OUT/scores/<run>.json          a run's evaluation scores with each item's correctness and gold log-probability
OUT/results.json, OUT/report.html
```
A recipe is a weighting of curated runs (`{fineweb-curated: 0.5, wikipedia: 0.5}` is a mix), so one curated run
serves every recipe that uses it. Scales are widths of the ladder preset's shape rule, each trained on
`tokens_per_param` tokens per parameter; the smallest scales run `seeds[i]` seeds each.
"""

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from curation.io import write_json_atomic, write_parquet_atomic, write_text_atomic
from experiments import decision_accuracy
from experiments.ablation import read_token_stats, scores_once, tokens_done
from experiments.ablation_stats import t_level_means, unit_counts
from experiments.decision_accuracy import Runs
from experiments.folders import LOCAL
from experiments.ladder import PRESETS, TRAINED_BEFORE_FIELDS, Ladder, LadderSpec, make_rung
from experiments.scaling_fit import interval
from experiments.spec_file import load_spec
from filters.benchmark_index import BenchmarkSpec, load_choice_items
from shard_contract import TOKENIZER_FILE, held_out

TARGET = "target_loss"


class CuratedSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    recipe: str = Field(description="a built-in recipe name or a recipe YAML")
    input: list[str] = Field(min_length=1, description="input paths or globs, as `curate run --input` takes them")


class TargetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    curated: list[str] = Field(min_length=1, description="curated inputs whose documents the target is held out of")
    fraction: float = Field(0.03, gt=0, lt=1, description="share of their documents held out (by a hash of the id)")
    max_tokens: int | None = Field(None, gt=0, description="tokens of each target document scored, its first ones (none: "
                                   "all): more documents, each cut shorter, narrow the target's document noise at the "
                                   "same scoring cost")  # fmt: skip


class DecideSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    curated: dict[str, CuratedSpec] = Field(min_length=1, description="name -> recipe and input: the curated data")
    recipes: dict[str, dict[str, float]] = Field(min_length=2, description="data recipe -> {curated name: weight}")
    target: TargetSpec
    evals: list[BenchmarkSpec] = Field(default_factory=list, description="multiple-choice evaluation sets (local files)")
    metric: str = Field(TARGET, description="the deciding metric, named before anything trains: target_loss, or an "
                        "evaluation set's `<name>/error` or `<name>/gold_nats_per_char`; the headline is its accuracy")
    max_items: int = Field(500, gt=0, description="items per evaluation set (a fixed sample of its first ones when more)")
    ladder: str = Field("cpu", description="ladder preset whose shape, lr rule, sequence and batch every scale uses: cpu|gpu")
    lr: float | None = Field(None, gt=0, description="the preset's peak lr instead (of its lr_width model; the same for "
                             "every recipe)")  # fmt: skip
    widths: list[int] = Field([20, 32, 48], min_length=2, description="one model width per scale, smallest first")
    tokens_per_param: float = Field(10.0, gt=0, allow_inf_nan=False,
                                    description="training tokens per (total) parameter at every scale")
    seeds: list[int] = Field([3, 3, 3], min_length=2, description="seeds per scale (the same list length as widths)")
    vocab_size: int = Field(2048, ge=256)
    tokenizer_sample_mb: float = Field(32.0, gt=0, description="text the tokenizer trains on, drawn from every curated run")
    max_epochs: float = Field(1.0, gt=0, description="no recipe's data repeated more often than this at any scale")
    parallel: int = Field(2, gt=0, description="runs trained side by side")
    eval_sequences: int = Field(64, gt=0, description="validation sequences each run logs (the decision reads doc_losses)")

    @field_validator("widths")
    @classmethod
    def increasing(cls, widths: list[int]) -> list[int]:
        if widths != sorted(set(widths)):
            raise ValueError(f"widths must be distinct and increasing (smallest scale first): {widths}")
        return widths

    @field_validator("ladder")
    @classmethod
    def known_preset(cls, ladder: str) -> str:
        if ladder not in PRESETS:
            raise ValueError(f"ladder is a preset, one of {sorted(PRESETS)}, not {ladder!r}")
        return ladder

    @model_validator(mode="after")
    def consistent(self) -> "DecideSpec":
        if len(self.seeds) != len(self.widths) or min(self.seeds) < 2:
            raise ValueError(f"seeds: one count per width ({len(self.widths)}), each at least 2: {self.seeds}")
        for recipe, weights in self.recipes.items():
            unknown = sorted(set(weights) - set(self.curated))
            if unknown or not weights or any(weight <= 0 for weight in weights.values()):
                raise ValueError(f"recipes.{recipe}: weights > 0 of curated names ({sorted(self.curated)}); unknown: {unknown}")
        unknown = sorted(set(self.target.curated) - set(self.curated))
        if unknown:
            raise ValueError(f"target.curated: {unknown} are not curated names ({sorted(self.curated)})")
        metrics = [TARGET] + [f"{bench.name}/{kind}" for bench in self.evals for kind in ("error", "gold_nats_per_char")]
        if self.metric not in metrics:
            raise ValueError(f"metric: {self.metric!r} is none of this spec's metrics ({', '.join(metrics)})")
        return self


def load_decision(path: str, **overrides) -> DecideSpec:
    return load_spec(DecideSpec, path, "decision", overrides)


class Decision:
    """The steps, each skipped when its output is there: curate, hold out the target, tokenize, train, score."""

    def __init__(self, spec: DecideSpec, out: str, log=print):
        from curation.recipe import load_recipe

        self.spec, self.out, self.log = spec, Path(out), log
        self.recipes = {name: load_recipe(curated.recipe) for name, curated in spec.curated.items()}
        for name in spec.target.curated:
            if self.recipes[name].source.kind not in ("parquet", "text"):
                raise ValueError(f"target.curated: {name} reads {self.recipes[name].source.kind} inputs, which have no text "
                                 "before extraction: hold the target out of parquet or text inputs")  # fmt: skip
        self.evals = {bench.name: load_choice_items(bench)[: spec.max_items] for bench in spec.evals}
        self.ladder_spec = LadderSpec(**(PRESETS["cpu"] | PRESETS[spec.ladder] | {
            "mixture": "", "forecast": False, "eval_sequences": spec.eval_sequences, "parallel": spec.parallel}
            | ({"lr": spec.lr} if spec.lr else {})))  # fmt: skip

    def inputs(self, name: str) -> tuple[list[str], str]:
        from curation.cli import make_console, resolve_inputs

        args = argparse.Namespace(input=self.spec.curated[name].input, max_files=None, snapshot=None)
        return resolve_inputs(args, make_console(), self.recipes[name].source.kind)

    def check_same(self) -> None:
        """The spec and the training rule its preset gives (a newer release may change the rule) match the folder's."""
        record = self.out / "decision.json"
        set_only = lambda spec: {key: value for key, value in spec.items() if value is not None}  # noqa: E731
        given = set_only(json.loads(self.spec.model_dump_json()))  # an option left unset is not part of it
        given["training_rule"] = json.loads(self.ladder_spec.model_dump_json(exclude={"mixture", "seed"}))
        recorded = set_only(json.loads(record.read_text())) if record.is_file() else given
        if "training_rule" in recorded:  # a rule recorded before a field existed was trained with its old value
            recorded["training_rule"] = TRAINED_BEFORE_FIELDS | recorded["training_rule"]
        if recorded != given:
            raise ValueError(f"{self.out} holds another decision (its decision.json differs): choose another --out")
        self.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(LOCAL, str(record), given)

    def curated(self, name: str) -> Path:
        return self.out / "curated" / name

    def curate(self, run_recipe) -> None:
        for name, recipe in self.recipes.items():
            self.log(f"curating {name} ({recipe.name})")
            inputs, snapshot = self.inputs(name)
            run_recipe(recipe, inputs, str(self.curated(name)), snapshot)

    def hold_out_target(self) -> Path:
        """The target documents, read from the target inputs before any curation: the ids the hash holds out."""
        from curation.sources.readers import read_input
        from curation.worker_stages import redacted

        out = self.out / "target" / "part-00000.parquet"
        if out.is_file():
            return out
        documents = {}  # id -> (text, curated name): a document read twice (a copy in the input) is one target
        for name in self.spec.target.curated:
            inputs, snapshot = self.inputs(name)
            for path in inputs:
                table = read_input(self.recipes[name].source, snapshot, path).table
                table = redacted(self.recipes[name], 0, table.select(["id", "text"]))  # as its curated run redacts it
                for doc_id, text in zip(table["id"].to_pylist(), table["text"].to_pylist()):
                    if held_out(doc_id, self.spec.target.fraction) and text and text.strip():
                        documents.setdefault(doc_id, (text, name))
        ids = sorted(documents)
        target = pa.table({"id": ids, "text": [documents[i][0] for i in ids], "source": [documents[i][1] for i in ids]})
        if target.num_rows == 0:
            raise ValueError(f"no target document held out of {self.spec.target.curated} at fraction {self.spec.target.fraction}")
        out.parent.mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(LOCAL, str(out), target)
        return out

    def tokenize(self, target: Path) -> dict[str, dict]:
        """One tokenizer for every curated run (trained on an equal share of each), their tokens without the target
        ids, and the target's tokens."""
        from tokenizers import Tokenizer

        from curation.tokenize import curated_parts, train_tokenizer, write_tokens

        path = self.out / TOKENIZER_FILE
        if path.is_file():
            tokenizer = Tokenizer.from_file(str(path))
        else:
            self.log(f"training the tokenizer ({self.spec.vocab_size:,} tokens) on {self.spec.tokenizer_sample_mb:g} MB")
            share = int(self.spec.tokenizer_sample_mb * 1e6 / len(self.recipes))
            tokenizer = train_tokenizer(sample_texts([curated_parts(str(self.curated(n))) for n in self.recipes], share),
                                        self.spec.vocab_size)  # fmt: skip
            write_text_atomic(LOCAL, str(path), tokenizer.to_str())
        stats = {}
        for name in self.recipes:
            folder = self.curated(name)
            if not tokens_done(folder):
                self.log(f"tokenizing {name}")
            stats[name] = read_token_stats(folder) if tokens_done(folder) else write_tokens(
                str(folder), curated_parts(str(folder)), tokenizer, self.spec.target.fraction)
        if not tokens_done(target.parent):
            write_tokens(str(target.parent), [str(target)], tokenizer, 0.0)
        return stats

    def mixture(self, recipe: str, target: Path) -> Path:
        path = self.out / "mixtures" / f"{recipe}.yaml"
        weights = self.spec.recipes[recipe]
        sources = {name: {"paths": [str(self.curated(name).resolve() / "tokens" / "part-*.parquet")],
                          "validation_paths": [str(target.parent.resolve() / "tokens" / "part-*.parquet")],
                          "validation": "named", "weight": weight / sum(weights.values()),
                          "max_epochs": self.spec.max_epochs} for name, weight in weights.items()}  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(LOCAL, str(path), yaml.safe_dump({"name": f"decide-{recipe}", "sources": sources}, sort_keys=False))
        return path

    def runs(self, target: Path) -> list[dict]:
        """Every (recipe, seed, scale) with its ladder and rung, largest compute first; the data checked for all
        before any trains."""
        jobs = []
        for recipe in self.spec.recipes:
            mixture = str(self.mixture(recipe, target))
            for seed in range(max(self.spec.seeds)):
                scales = [i for i, seeds in enumerate(self.spec.seeds) if seed < seeds]
                spec = self.ladder_spec.model_copy(update={"mixture": mixture, "seed": seed})
                ladder = Ladder(spec, str(self.out / "train" / f"{recipe}-seed{seed}"), log=self.log)
                for scale in scales:
                    width = self.spec.widths[scale]
                    rung = make_rung(spec, width, self.budget(spec, width, ladder.vocab), ladder.vocab)
                    jobs.append({"run": f"{recipe}-seed{seed}-{rung.name}", "recipe": recipe, "seed": seed,
                                 "scale": scale, "ladder": ladder, "rung": rung})  # fmt: skip
        for job in jobs:
            problem = job["ladder"].over_cap(job["rung"])
            if problem:
                raise ValueError(f"recipe {job['recipe']} at width {job['rung'].width} ({job['rung'].tokens:,} tokens): "
                                 f"{problem}; lower tokens_per_param or the widths, or raise max_epochs")  # fmt: skip
        return sorted(jobs, key=lambda job: -job["rung"].flops)

    def budget(self, spec: LadderSpec, width: int, vocab: int) -> float:
        from experiments.ladder import model_size

        total, _, per_token = model_size(spec, width, vocab)
        return self.spec.tokens_per_param * total * per_token

    def train_and_score(self, job: dict, threads: int, target_tokens: pa.Table) -> dict:
        ladder, rung = job["ladder"], job["rung"]
        if not ladder.result_path(rung).is_file():  # decision.json already pins the finished ones, rule included
            ladder.check_same_ladder()
        result = ladder.train(rung, threads)
        folder = ladder.out / "runs" / rung.name
        losses = self.doc_losses(job["run"], folder, target_tokens)
        scores = self.score(job["run"], folder)
        return {"result": result, "losses": losses, "scores": scores}

    def doc_losses(self, run: str, folder: Path, target_tokens: pa.Table) -> pa.Table:
        path = self.out / "doc_losses" / f"{run}.parquet"
        if path.is_file():
            return pq.read_table(path)
        from training.doc_losses import score_documents

        losses = score_documents(folder, target_tokens["id"].to_pylist(), target_tokens["tokens"].to_pylist(), self.ladder_spec.seq_len)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(LOCAL, str(path), losses)
        return losses

    def score(self, run: str, folder: Path) -> dict:
        return scores_once(self.out / "scores" / f"{run}.json", folder, self.evals)


def sample_texts(parts_per_run: list[list[str]], share_bytes: int):
    """Up to share_bytes of text from each run's parts, in order: every run shapes the tokenizer equally."""
    for parts in parts_per_run:
        taken = 0
        for part in parts:
            for text in pq.read_table(part, columns=["text"])["text"].to_pylist():
                if taken >= share_bytes:
                    break
                taken += len(text.encode())
                yield text
            if taken >= share_bytes:
                break


def run_decision(decision: Decision, run_recipe) -> dict:
    """Every step (each resumed where its output is there), then OUT/results.json and OUT/report.html."""
    from experiments.decide_report import render

    started = time.perf_counter()
    decision.check_same()
    decision.curate(run_recipe)
    target = decision.hold_out_target()
    token_stats = decision.tokenize(target)
    target_tokens = scored_target(target.parent / "tokens" / target.name, decision.spec.target.max_tokens)
    jobs = decision.runs(target)
    done = sum(job["ladder"].result_path(job["rung"]).is_file() for job in jobs)
    decision.log(f"{len(jobs)} runs ({len(decision.spec.recipes)} recipes x scales x seeds), {done} already finished; "
                 f"{sum(job['rung'].flops for job in jobs):.2e} FLOPs in all")  # fmt: skip
    threads = max(1, (os.cpu_count() or 1) // min(decision.spec.parallel, len(jobs)))
    finished = {}

    def one(job: dict) -> None:
        finished[job["run"]] = decision.train_and_score(job, threads, target_tokens)
        decision.log(f"  {job['run']}: target loss {per_token(finished[job['run']]['losses']):.4f} "
                     f"({len(finished)} of {len(jobs)} runs done)")  # fmt: skip

    with ThreadPoolExecutor(decision.spec.parallel) as pool:
        for future in [pool.submit(one, job) for job in jobs]:
            future.result()
    results = summarize(decision.spec, jobs, finished, token_stats, target_tokens)
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    write_json_atomic(LOCAL, str(decision.out / "results.json"), results)
    write_text_atomic(LOCAL, str(decision.out / "report.html"), render(results))
    return results


def scored_target(tokens: Path, max_tokens: int | None) -> pa.Table:
    """(id, tokens) of the target as every run scores it: each document's first max_tokens tokens."""
    table = pq.read_table(tokens, columns=["id", "tokens"])
    if max_tokens is None:
        return table
    return table.set_column(1, "tokens", pc.list_slice(table["tokens"], 0, max_tokens))


def per_token(losses: pa.Table) -> float:
    return float(np.sum(losses["loss_sum"].to_numpy()) / max(1, np.sum(losses["tokens"].to_numpy())))


def metric_tables(spec: DecideSpec, jobs: list[dict], finished: dict) -> tuple[dict, dict]:
    """(metric -> scale -> recipe -> (seeds, units) sums, metric -> (units,) weights): the target loss per document,
    and per evaluation set its error per item and the right answer's negative log-probability per character."""
    sums: dict[str, dict[int, dict[str, list]]] = {}
    weights = {}
    for job in sorted(jobs, key=lambda job: (job["scale"], job["recipe"], job["seed"])):
        run = finished[job["run"]]
        losses = run["losses"]
        rows = {TARGET: losses["loss_sum"].to_numpy()}
        weights[TARGET] = losses["tokens"].to_numpy().astype(np.float64)
        for name, score in run["scores"].items():
            rows[f"{name}/error"] = 1.0 - np.asarray(score["item_correct"], dtype=np.float64)
            weights[f"{name}/error"] = np.ones(len(score["item_correct"]))
            rows[f"{name}/gold_nats_per_char"] = -np.asarray(score["item_gold_per_char"], dtype=np.float64)
            weights[f"{name}/gold_nats_per_char"] = np.ones(len(score["item_gold_per_char"]))
        for metric, row in rows.items():
            sums.setdefault(metric, {}).setdefault(job["scale"], {}).setdefault(job["recipe"], []).append(row)
    return ({metric: {scale: {recipe: np.stack(rows) for recipe, rows in by_recipe.items()}
                      for scale, by_recipe in by_scale.items()} for metric, by_scale in sums.items()}, weights)  # fmt: skip


def summarize(spec: DecideSpec, jobs: list[dict], finished: dict, token_stats: dict, target_tokens: pa.Table) -> dict:
    """Per metric, scale and recipe the value with its interval; per metric and smaller scale the decision accuracy
    against the same metric at the largest scale and against the target loss there; the spec's deciding metric's
    accuracy as the headline; a search for the metric that decides best at the smallest scale, chosen on one half of
    the units and reported on the other; per recipe a power law of target loss in compute fitted on the smaller scales
    and its forecast of the largest, where there are 3 smaller scales to fit."""
    sums, weights = metric_tables(spec, jobs, finished)
    largest = len(spec.widths) - 1
    flops = {job["scale"]: job["rung"].flops for job in jobs}
    scales = [{"scale": i, "width": width, "params": next(j["rung"].params_total for j in jobs if j["scale"] == i),
               "tokens": next(j["rung"].tokens for j in jobs if j["scale"] == i), "flops": flops[i], "seeds": spec.seeds[i]}
              for i, width in enumerate(spec.widths)]  # fmt: skip
    values = {metric: {str(scale): {recipe: decision_accuracy.recipe_value(runs, weights[metric])
                                    for recipe, runs in by_recipe.items()} for scale, by_recipe in by_scale.items()}
              for metric, by_scale in sums.items()}  # fmt: skip
    decisions = {metric: decisions_of(sums, weights, metric, largest) for metric in sums}
    return {
        "recipes": spec.recipes, "scales": scales, "compute_span": flops[largest] / flops[0],
        "target": target_summary(sums[TARGET], weights[TARGET], target_tokens),
        "curated": {name: {"documents": sum(s["documents"] for s in stats["sources"].values()),
                           "training_tokens": sum(s["tokens"] - s["validation_tokens"] for s in stats["sources"].values())}
                    for name, stats in token_stats.items()},
        "evals": {bench.name: len(next(iter(finished.values()))["scores"].get(bench.name, {}).get("item_correct", []))
                  for bench in spec.evals},
        "values": values, "decisions": decisions,
        "deciding": {"metric": spec.metric, "against_itself": decisions[spec.metric]["against_itself"],
                     "chance": decisions[spec.metric]["chance"]},
        "metric_search": {truth: metric_search(sums, weights, largest, truth) for truth in decision_accuracy.TRUTHS},
        "forecasts": forecasts(sums[TARGET], weights[TARGET], scales),
        "runs": [{"run": job["run"], "recipe": job["recipe"], "seed": job["seed"], "scale": job["scale"],
                  "val_loss": finished[job["run"]]["result"]["val_loss"], "target_loss": per_token(finished[job["run"]]["losses"]),
                  "seconds": finished[job["run"]]["result"]["seconds"]} for job in jobs],
    }  # fmt: skip


def decisions_of(sums: dict, weights: dict, metric: str, largest: int, units: dict | None = None) -> dict:
    """One metric's truths at the largest scale and the accuracy of each smaller scale against them and against the
    target loss's. `units`: metric -> the indices of its units to use (a half, for the metric search); all if None."""
    def part(name: str, scale: int) -> tuple[dict, np.ndarray]:
        keep = slice(None) if units is None else units[name]
        return {recipe: runs[:, keep] for recipe, runs in sums[name][scale].items()}, weights[name][keep]

    own_largest, own_weights = part(metric, largest)
    target_largest, target_weights = part(TARGET, largest)
    own_truth = decision_accuracy.truths(own_largest, own_weights)
    target_truth = own_truth if metric == TARGET else decision_accuracy.truths(target_largest, target_weights)
    against = {"against_itself": (own_truth, own_largest, own_weights, True),
               "against_target_loss": (target_truth, target_largest, target_weights, metric == TARGET)}
    result = {"truth": [{"pair": list(pair)} | verdict for pair, verdict in own_truth.items()],
              "chance": decision_accuracy.chance_line(own_truth),
              "ranking_at_largest": decision_accuracy.ranking(own_largest, own_weights)}  # fmt: skip
    for kind, (truth, truth_runs, truth_weights, same_units) in against.items():
        result[kind] = {str(scale): decision_accuracy.accuracy(*part(metric, scale), truth, truth_runs, truth_weights, same_units)
                        for scale in range(largest)}  # fmt: skip
    return result


def metric_search(sums: dict, weights: dict, largest: int, truth: str, seed: int = 0) -> dict:
    """The metric whose smallest scale orders the most resolved pairs right (accuracy first, then how many pairs it
    rests on), chosen on one random half of every metric's units and reported on the other half: the accuracy of a
    metric picked for its accuracy, on the units it was picked on, would be selected on its outcome."""
    halves = {metric: decision_accuracy.split_units(len(weights[metric]), seed) for metric in sums}
    choose, report = ({metric: pair[i] for metric, pair in halves.items()} for i in (0, 1))
    scored = {metric: decisions_of(sums, weights, metric, largest, choose)[truth]["0"] for metric in sums}
    scored = {metric: found for metric, found in scored.items() if found["accuracy"] is not None}
    if not scored:
        return {"metric": None, "how": "no resolved pair on the choosing half of any metric's units"}
    metric = max(scored, key=lambda name: (scored[name]["accuracy"], scored[name]["pairs_resolved"]))
    found = decisions_of(sums, weights, metric, largest, report)[truth]["0"]
    return {"metric": metric, "accuracy": found["accuracy"], "interval": found["interval"], "pairs": found["pairs_resolved"],
            "chosen_with": scored[metric]["accuracy"],
            "how": "chosen on one random half of each metric's units, its accuracy measured on the other half"}  # fmt: skip


DOCUMENT_HALF_WIDTH = 0.02  # nats: the target's own noise must sit below the seeds' (module goal)


def target_summary(target: dict[int, Runs], weights: np.ndarray, target_tokens: pa.Table) -> dict:
    """The target's size and the half-width its documents alone give a recipe's target loss at the largest scale
    (the widest over recipes; units resampled, the seeds' mean held): the documents it would take to bring that to
    DOCUMENT_HALF_WIDTH nats, as the half-width narrows with the square root of their count."""
    rng = np.random.default_rng(0)
    counts = unit_counts(len(weights), decision_accuracy.RESAMPLES, rng)
    half_widths = []
    for runs in target[max(target)].values():
        means = (counts @ runs.mean(axis=0)) / (counts @ weights)
        low, high = interval(means)
        half_widths.append((high - low) / 2)
    half = max(half_widths)
    documents = target_tokens.num_rows
    return {"documents": documents, "tokens": pc.sum(pc.list_value_length(target_tokens["tokens"])).as_py() or 0,
            "document_half_width": half, "goal_half_width": DOCUMENT_HALF_WIDTH,
            "documents_for_goal": int(np.ceil(documents * (half / DOCUMENT_HALF_WIDTH) ** 2))}  # fmt: skip


FORECAST_SCALES = 3  # a line through fewer smaller scales is exact or one point: no forecast at all


def forecasts(target: dict[int, Runs], weights: np.ndarray, scales: list[dict], seed: int = 0) -> dict:
    """Per recipe, log(loss) linear in log(compute) through the smaller scales' means, extended to the largest
    scale, with an interval from the seeds (each scale's mean redrawn at the t-based seed level, the line refitted):
    the forecast a team would make from its small runs, against what the largest runs measured. Needs
    FORECAST_SCALES smaller scales."""
    smaller = len(scales) - 1
    if smaller < FORECAST_SCALES:
        return {"made": False, "why": f"no forecast: needs {FORECAST_SCALES} smaller scales (this decision has {smaller})"}
    rng = np.random.default_rng(seed)
    x = np.log([scale["flops"] for scale in scales[:smaller]])
    every_unit = np.ones((decision_accuracy.RESAMPLES, len(weights)))  # the documents held: they are the same at every scale
    result = {}
    for recipe in target[smaller]:
        means = np.array([(target[i][recipe].sum(axis=1) / weights.sum()).mean() for i in range(smaller)])
        draws = np.stack([t_level_means(target[i][recipe], every_unit, weights, rng) for i in range(smaller)])
        slope, intercept = np.polyfit(x, np.log(means), 1)
        slopes, intercepts = np.polyfit(x, np.log(np.maximum(draws, 1e-12)), 1)
        at = np.log(scales[-1]["flops"])
        predicted = float(np.exp(intercept + slope * at))
        low, high = interval(np.exp(intercepts + slopes * at))
        measured = float((target[smaller][recipe].sum(axis=1) / weights.sum()).mean())
        result[recipe] = {"exponent": float(-slope), "predicted": predicted, "interval": [low, high], "measured": measured,
                          "relative_error": (predicted - measured) / measured, "measured_inside": low <= measured <= high}  # fmt: skip
    return {"made": True, "recipes": result}
