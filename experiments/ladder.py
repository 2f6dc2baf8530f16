"""`train ladder`: a model ladder on one mixture, IsoFLOP sets of rungs trained with the existing trainer, a
Chinchilla fit of their validation losses, and one larger rung forecast before it is trained.

```
OUT/ladder.json            the ladder as given; a rerun into OUT must give the same one (then it resumes)
OUT/configs/<rung>.yaml    the training settings of each rung (its shape by the rule below)
OUT/runs/<rung>/           a `train` run per rung (its log beside it); a killed rung resumes from its checkpoint
OUT/results/<rung>.json    a finished rung: N both ways, tokens, FLOPs, final validation loss, and the wall seconds
                           of the invocation that finished it
OUT/forecast.json          the held-out rung's predicted loss, written before that rung trains
OUT/fit.json, OUT/report.html
```
The shape rule (OLMo's ladder picks depth, width and heads from a table; ours is one line so any width is a rung):
`n_layers = max(1, round(width / aspect))`, `n_heads = n_kv_heads` = the most heads of at least head_dim
dimensions that divide the width, `ffn_hidden` = 8/3 x
width rounded up to a multiple of 16, tied embeddings, peak lr = lr x lr_width / width (measured, `learning_rate`).
N counts both ways: total (Chinchilla: every parameter) and
non-embedding (Kaplan); a rung's FLOPs are the model's FLOPs per token (6N plus attention, training.model) x tokens.

Bracketing: an IsoFLOP set whose lowest validation loss is at its smallest (largest) width has not found its
optimum, and both of Chinchilla's approaches extrapolate from it. So after the sets train, each such budget gets the
next width past that edge, `width_step`: width / 1.5 (x 1.5) rounded to a multiple of 8, at least 8, trained like
any rung (named iso-<budget>-w<width>), until its lowest loss is inside or `bracket` widths were added to it (or the
next would repeat its data past max_epochs). One rule for every corpus; the forecast is made after it, from every
rung trained so far.
"""

import ctypes
import html
import json
import math
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from curation.io import write_json_atomic, write_text_atomic
from experiments import scaling_fit
from experiments.folders import LOCAL
from experiments.spec_file import load_spec

COUNTS = {"total": "params_total", "non_embedding": "params_non_embedding"}  # Chinchilla's N, Kaplan's N
PR_SET_PDEATHSIG = 1
GPU_PEAK_FLOPS, GPU_MFU = 989e12, 0.4  # H100 SXM dense bf16; a planning MFU for GPU-hour estimates


class LadderSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mixture: str = Field(description="mixture YAML whose sources every rung trains on (its validation set scores them)")
    widths: list[int] = Field([24, 32, 48, 64], min_length=4, description="model widths: one model size each")
    budgets: list[float] = Field([5e11, 1e12, 2e12], min_length=3, description="IsoFLOP budgets: every width at each")
    holdout_factor: float = Field(2.0, gt=1, allow_inf_nan=False,
                                  description="the held-out rung's compute, times the largest budget")
    aspect: int = Field(32, gt=0, description="width per layer: n_layers = round(width / aspect)")
    head_dim: int = Field(16, gt=0)
    seq_len: int = Field(128, gt=0)
    global_batch: int = Field(8, gt=0, description="sequences per step: at fixed tokens, 8 (twice the steps of 16) put one "
                              "recipe's seeds within 0.05 nats at w20, w32 and w48 (benchmarks/seed_noise.py)")
    lr: float = Field(8e-3, gt=0, description="peak learning rate (of the lr_width model when lr_width is set)")
    lr_width: int | None = Field(64, gt=0, description="scale lr by lr_width / width (Adam's rule for hidden layers, "
                                 "as muP): lr is the lr_width model's; none: one lr for every width")
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_fraction: float = Field(0.05, ge=0, lt=1)
    z_loss: float = Field(0.0, ge=0, description="weight of PaLM's z-loss on every rung (0: off)")
    average_last: float = Field(0.0, ge=0, lt=1, description="every rung ends with the mean of its weights over this "
                                "fraction of its last steps (0: its last step's weights)")
    qk_norm: bool = Field(False, description="RMSNorm over each head's queries and keys on every rung")
    optimizer: Literal["adamw", "muon"] = Field("adamw", description="every rung's optimizer (muon: Muon for the blocks' "
                                                "matrices, AdamW for the rest, at the same lr)")  # fmt: skip
    moe_experts: int = Field(0, ge=0, description="mixture-of-experts feed-forwards with this many experts, top_k 2, each "
                             "half the dense FFN's width (the dense rung's active parameters); 0: dense")  # fmt: skip
    init_std: float | None = Field(None, gt=0, description="std of every weight matrix's init; none: 1 / sqrt(fan_in) "
                                   "(0.02, GPT-2's, left the cpu preset's w20 seeds 0.6 nats apart)")
    eval_sequences: int = Field(256, gt=0, description="held-out sequences per source scored at the end of each rung")
    seed: int = 0
    parallel: int = Field(2, gt=0, description="rungs trained side by side")
    ranks: int | None = Field(1, gt=0, description="processes per rung (1: each rung on its own core; none: every GPU)")
    micro_batch: int | None = Field(None, gt=0, description="sequences per rank per forward (default: the batch over ranks)")
    count: str = Field("total", description="the N the forecast and the headline use: total or non_embedding")
    budget_queries: list[float] = Field([1e21], description="compute budgets to answer (--budget): N, D, tokens per "
                                        "parameter, loss")
    forecast: bool = Field(True, description="forecast, then train, the held-out rung (an ablation's ladders skip it)")
    bracket: int = Field(2, ge=0, description="extra widths per budget at most, added past its smallest or largest "
                         "width while its lowest loss is there (0: none)")  # fmt: skip

    @field_validator("widths")
    @classmethod
    def distinct_widths(cls, widths: list[int]) -> list[int]:
        if len(set(widths)) < len(widths) or min(widths) < 8:
            raise ValueError(f"widths must be distinct and at least 8: {widths}")
        return sorted(widths)

    @field_validator("budgets", "budget_queries")
    @classmethod
    def compute_budgets(cls, budgets: list[float]) -> list[float]:
        bad = [budget for budget in budgets if not (math.isfinite(budget) and budget > 0)]
        if bad:
            shown = ", ".join(f"{budget:g}" for budget in bad)
            raise ValueError(f"{shown}: not a compute budget; give finite FLOPs above 0, e.g. 1e21")
        return budgets

    @field_validator("count")
    @classmethod
    def known_count(cls, count: str) -> str:
        if count not in COUNTS:
            raise ValueError(f"count is one of {sorted(COUNTS)}, not {count!r}")
        return count


# What rungs recorded before a field existed were trained with: a ladder.json without the field had that setting.
TRAINED_BEFORE_FIELDS = {"z_loss": 0.0, "qk_norm": False, "init_std": 0.02, "average_last": 0.0, "optimizer": "adamw",
                         "moe_experts": 0}  # fmt: skip

PRESETS = {
    "cpu": {"mixture": "mixtures/ladder_code.yaml"},
    "gpu": {"widths": [512, 768, 1024, 1280, 1536], "budgets": [2e18, 6e18, 2e19], "holdout_factor": 3.0, "aspect": 64,
            "head_dim": 64, "seq_len": 2048, "global_batch": 256, "micro_batch": 8, "lr": 1e-3, "lr_width": None, "eval_sequences": 512,
            "parallel": 1, "ranks": None},
}  # fmt: skip


def load_ladder(path: str | None, **overrides) -> LadderSpec:
    """A ladder YAML (or a preset name: cpu, gpu) with CLI values on top; errors name the field."""
    return load_spec(LadderSpec, path, "ladder", overrides, PRESETS)


def shape(spec: LadderSpec, width: int) -> dict:
    heads = max(1, width // spec.head_dim)
    while width % heads:  # the most heads of at least head_dim that divide the width
        heads -= 1
    ffn_hidden = -(-8 * width // 3 // 16) * 16
    experts = {"moe_experts": spec.moe_experts, "moe_top_k": 2, "moe_hidden": ffn_hidden // 2} if spec.moe_experts else {}
    return {"dim": width, "n_layers": max(1, round(width / spec.aspect)), "n_heads": heads, "n_kv_heads": heads,
            "ffn_hidden": ffn_hidden, "tie_embeddings": True, "qk_norm": spec.qk_norm, "init_std": spec.init_std, **experts}  # fmt: skip


def learning_rate(spec: LadderSpec, width: int) -> float:
    """A width's peak lr: the optimum moves as 1/width (cpu preset, 1e12 FLOPs, init 0.02: width 24 best at >= 1.2e-2
    of 1.5e-3..1.2e-2, width 64 between 3e-3 and 6e-3), so one lr for all trains some rungs far from their optimum.
    With the fan-in init the cpu preset's rule is 8e-3 x 64 / width (benchmarks/seed_noise.py: at w20, 8e-3 gave a
    lower loss and seed spread than 2e-3, 4e-3 and 1.6e-2)."""
    return spec.lr if spec.lr_width is None else spec.lr * spec.lr_width / width


def learning_rate_rule(spec: LadderSpec) -> str:
    return f"{spec.lr:g}" if spec.lr_width is None else f"{spec.lr:g} x {spec.lr_width} / width"


def rung_settings(spec: LadderSpec, width: int, steps: int, ranks: int) -> dict:
    """The `train` settings of one model of the ladder's rule: its width's shape, init and lr, `steps` steps of a
    cosine schedule with the rule's warmup, windows shuffled; evaluated and checkpointed by its length."""
    lr = learning_rate(spec, width)
    return {
        "model": "tiny", "model_overrides": shape(spec, width), "seq_len": spec.seq_len, "steps": steps,
        "global_batch": spec.global_batch, "micro_batch": spec.micro_batch or spec.global_batch // ranks,
        "lr": lr, "min_lr": lr * spec.min_lr_ratio, "warmup": round(spec.warmup_fraction * steps),
        "schedule": "cosine", "shuffle_sequences": True, "seed": spec.seed, "eval_every": steps, "z_loss": spec.z_loss,
        "average_last": spec.average_last, "optimizer": spec.optimizer,
        "eval_sequences": spec.eval_sequences, "checkpoint_every": max(1, steps // 4), "keep_checkpoints": 1,
        "log_every": max(1, steps // 50),
    }  # fmt: skip


def write_settings(path: Path, settings: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(LOCAL, str(path), yaml.safe_dump(settings, sort_keys=False))
    return path


@dataclass
class Rung:
    name: str
    width: int
    budget: float  # the FLOPs asked; `flops` is what the whole steps come to
    steps: int
    tokens: int
    flops: float
    params_total: int
    params_non_embedding: int
    flops_per_token: float
    held_out: bool = False


def model_size(spec: LadderSpec, width: int, vocab: int) -> tuple[int, int, float]:
    """(total parameters, non-embedding parameters, training FLOPs per token) of a width's shape."""
    import torch

    from training.model import ModelConfig, Transformer, flops_per_token

    config = ModelConfig(**shape(spec, width), vocab_size=vocab, max_seq_len=spec.seq_len)
    with torch.device("meta"):
        model = Transformer(config)
    total = model.num_params()
    return total, model.num_params(embeddings=False), flops_per_token(config, model.num_params(active=True), spec.seq_len)


def make_rung(spec: LadderSpec, width: int, budget: float, vocab: int, held_out: bool = False) -> Rung:
    total, non_embedding, per_token = model_size(spec, width, vocab)
    tokens_per_step = spec.global_batch * spec.seq_len
    steps = max(1, round(budget / per_token / tokens_per_step))
    tokens = steps * tokens_per_step
    name = f"{'holdout' if held_out else 'iso'}-{budget:.1e}-w{width}".replace("+", "")
    return Rung(name, width, budget, steps, tokens, tokens * per_token, total, non_embedding, per_token, held_out)


def drawn_points(law, rungs: list[Rung], sigma: float, rng) -> list[dict]:
    """The points `rungs` would give if their losses were `law`'s (a scaling_fit.Law) times lognormal noise of
    `sigma`: what tests of the fit and benchmarks/law_span.py fit, in the ladder's point format, N total."""
    return [{"run": r.name, "size": f"w{r.width}", "params": float(r.params_total), "params_total": float(r.params_total),
             "params_non_embedding": float(r.params_non_embedding), "tokens": float(r.tokens), "flops": float(r.flops),
             "held_out": r.held_out, "val_loss": float(law.loss(r.params_total, r.tokens) * math.exp(rng.normal(0, sigma)))}
            for r in rungs]  # fmt: skip


def width_step(width: int, up: bool) -> int:
    """The next width of the bracketing grid past `width`: x 1.5 or / 1.5, rounded to a multiple of 8, at least 8."""
    return max(8, 8 * round((width * 1.5 if up else width / 1.5) / 8))


def bracketing_width(losses: dict[int, float]) -> int | None:
    """The width to add to an IsoFLOP set (width -> validation loss) whose lowest loss is at its smallest or largest
    width: one step past that edge. None when the lowest loss is inside, or no smaller width is left (width 8)."""
    best = min(losses, key=losses.get)
    if min(losses) < best < max(losses):
        return None
    beyond = width_step(best, up=best == max(losses))
    return None if beyond == best else beyond


def widths_nearest(spec: LadderSpec, params: float, vocab: int, count: str) -> list[int]:
    """Widths (steps of 8, from the smallest rung's to twice the largest's), nearest in N to `params` first."""
    index = 0 if count == "total" else 1
    candidates = range(spec.widths[0], 2 * spec.widths[-1] + 1, 8)
    return sorted(candidates, key=lambda width: abs(math.log(model_size(spec, width, vocab)[index] / params)))


class Ladder:
    """The rungs, each skipped when its result is there: train the IsoFLOP sets, fit, forecast, train the held-out
    rung, fit again and report."""

    def __init__(self, spec: LadderSpec, out: str, log=print, assumed_vocab: int | None = None):
        """`assumed_vocab`: the vocabulary a plan assumes while the mixture's data is not built yet (then `data_built`
        is False and nothing can train); None: the data must be there."""
        from tokenizers import Tokenizer

        from training import storage
        from training.mixture import load_mixture

        self.spec, self.out, self.log = spec, Path(out), log
        self.mixture = load_mixture(spec.mixture)
        self.data_built = data_built(self.mixture)
        if self.data_built or assumed_vocab is None:  # not built: reading the tokenizer says what is missing
            self.vocab = Tokenizer.from_str(storage.read_text(self.mixture.tokenizer_path())).get_vocab_size()
        else:
            self.vocab = assumed_vocab
        self.rungs = [make_rung(spec, width, budget, self.vocab) for budget in spec.budgets for width in spec.widths]
        self.shards = None
        self.ranks = spec.ranks or self._gpus()

    @staticmethod
    def _gpus() -> int:
        import torch

        return torch.cuda.device_count() or 1

    def check_same_ladder(self) -> None:
        record = self.out / "ladder.json"
        given = json.loads(self.spec.model_dump_json())
        if record.is_file() and TRAINED_BEFORE_FIELDS | json.loads(record.read_text()) != given:
            raise ValueError(f"{self.out} holds another ladder (its ladder.json differs): choose another --out")
        self.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(LOCAL, str(record), given)

    def source_plans(self, rung: Rung) -> list:
        """What a rung asks of each source against what the source has (training.plan's SourcePlan)."""
        from training.data import read_sources
        from training.plan import plan

        if self.shards is None:
            self.shards = read_sources(self.mixture)
        return plan(self.mixture, [rung.tokens], self.shards)

    def over_cap(self, rung: Rung) -> str | None:
        """Why a rung would repeat its sources more than their max_epochs, or None."""
        from training.plan import over_cap

        return over_cap(self.source_plans(rung))

    def check_data(self, rungs: list[Rung]) -> None:
        """Every rung within its sources' max_epochs, before any rung trains."""
        for rung in rungs:
            problem = self.over_cap(rung)
            if problem:
                raise ValueError(f"rung {rung.name} ({rung.tokens:,} tokens): {problem}")

    def config(self, rung: Rung) -> Path:
        path = self.out / "configs" / f"{rung.name}.yaml"
        return write_settings(path, rung_settings(self.spec, rung.width, rung.steps, self.ranks))

    def result_path(self, rung: Rung) -> Path:
        return self.out / "results" / f"{rung.name}.json"

    def train(self, rung: Rung, threads: int) -> dict:
        """One rung under `train` (resumed from its checkpoint when killed before), then its result file."""
        from training import metrics

        if self.result_path(rung).is_file():
            return json.loads(self.result_path(rung).read_text())
        folder = self.out / "runs" / rung.name
        command = [sys.executable, "-m", "training", "--mixture", self.spec.mixture, "--config", str(self.config(rung)),
                   "--out", str(folder), "--ranks", str(self.ranks), "--resume"]  # fmt: skip
        log = self.out / "runs" / f"{rung.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with log.open("a") as handle:
            env = os.environ | {"OMP_NUM_THREADS": str(threads)}
            code = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent).returncode
        if code:
            raise RuntimeError(f"rung {rung.name} failed (exit {code}); the end of {log}:\n{log.read_text()[-2000:]}")
        frame = metrics.load(str(folder))
        final = frame[frame.val_loss.notna()].iloc[-1]
        result = {"run": rung.name, "size": f"w{rung.width}", "width": rung.width, "params": rung.params_total,
                  "params_total": rung.params_total, "params_non_embedding": rung.params_non_embedding,
                  "tokens": rung.tokens, "steps": rung.steps, "flops": rung.flops, "flops_per_token": rung.flops_per_token,
                  "budget": rung.budget, "val_loss": float(final.val_loss), "held_out": rung.held_out,
                  "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
        self.result_path(rung).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(LOCAL, str(self.result_path(rung)), result)
        return result

    def train_all(self, rungs: list[Rung]) -> list[dict]:
        """The rungs side by side, `parallel` at a time, each with its share of the cores; the largest first, so the
        last to finish is a small one."""
        todo = sorted(rungs, key=lambda rung: -rung.flops)
        threads = max(1, (os.cpu_count() or 1) // (min(self.spec.parallel, len(todo)) * self.ranks))
        done = sum(self.result_path(rung).is_file() for rung in rungs)
        if done:
            self.log(f"resumed: {done} of {len(rungs)} rungs already finished")
        results = {}

        def one(rung: Rung) -> None:
            fresh = not self.result_path(rung).is_file()
            if fresh:
                self.log(f"training {rung.name}: {rung.params_total:,} params ({rung.params_non_embedding:,} non-embedding), "
                         f"{rung.tokens:,} tokens, {rung.steps} steps, {rung.flops:.2e} FLOPs")  # fmt: skip
            results[rung.name] = self.train(rung, threads)
            if fresh:
                self.log(f"  {rung.name}: validation loss {results[rung.name]['val_loss']:.4f} "
                         f"({results[rung.name]['seconds']:.0f} s; {len(results)} of {len(rungs)} rungs done)")  # fmt: skip

        with ThreadPoolExecutor(self.spec.parallel) as pool:
            for future in [pool.submit(one, rung) for rung in todo]:
                future.result()
        return [results[rung.name] for rung in rungs]

    def bracket(self, points: list[dict]) -> list[dict]:
        """The points with the bracketing rungs' (module docstring), trained a round at a time side by side."""
        added = dict.fromkeys(self.spec.budgets, 0)
        while True:
            rungs = []
            for budget in self.spec.budgets:
                width = bracketing_width({p["width"]: p["val_loss"] for p in points if p["budget"] == budget})
                if width is None or added[budget] >= self.spec.bracket:
                    continue
                rung = make_rung(self.spec, width, budget, self.vocab)
                problem = self.over_cap(rung)
                if problem:
                    self.log(f"{budget:.2g} FLOPs: its lowest loss is at an edge of its widths, but {rung.name} would "
                             f"{problem}; not bracketed")  # fmt: skip
                    added[budget] = self.spec.bracket
                    continue
                self.log(f"{budget:.2g} FLOPs: its lowest loss is at an edge of its widths; bracketing with {rung.name}")
                added[budget] += 1
                rungs.append(rung)
            if not rungs:
                return points
            points = points + self.train_all(rungs)

    def forecast(self, points: list[dict]) -> tuple[Rung, dict]:
        """The held-out rung (the fitted compute-optimal size at holdout_factor x the largest budget) and its
        predicted loss, written before it trains with whether the law it came from is identified; a rerun keeps the
        forecast it made."""
        path = self.out / "forecast.json"
        if path.is_file():
            made = json.loads(path.read_text())
            return make_rung(self.spec, made["width"], made["budget"], self.vocab, held_out=True), made
        budget = self.spec.holdout_factor * max(self.spec.budgets)
        column = COUNTS[self.spec.count]
        arrays = fit_arrays(points, column)
        law = scaling_fit.fit_law(*arrays)
        k = median_flops_per_param_token(points, column)
        optimal_n, _ = law.optimal(budget, k)
        candidates = (make_rung(self.spec, width, budget, self.vocab, True)
                      for width in widths_nearest(self.spec, optimal_n, self.vocab, self.spec.count))  # fmt: skip
        rung = next((rung for rung in candidates if not self.over_cap(rung)), None)
        if rung is None:
            raise ValueError(f"no width of the shape rule trains {budget:.2e} FLOPs within the mixture's max_epochs: "
                             "curate more data or lower holdout_factor")  # fmt: skip
        n = getattr(rung, column)
        laws = scaling_fit.bootstrap(*arrays, samples=200, seed=self.spec.seed, law=law)
        low, high = scaling_fit.interval([one.loss(n, rung.tokens) for one in laws])
        approach2 = scaling_fit.isoflop_minima(scaling_fit.group_by_compute([p | {"params": p[column]} for p in points]), k)
        identification = scaling_fit.identification(law, *arrays, scaling_fit.parameter_intervals(laws), approach2)
        made = {"run": rung.name, "width": rung.width, "budget": budget, "count": self.spec.count, "params": n,
                "tokens": rung.tokens, "flops": rung.flops, "predicted_loss": float(law.loss(n, rung.tokens)),
                "interval": [float(low), float(high)], "compute_optimal_params": float(optimal_n),
                "identification": identification, "fitted_on": [point["run"] for point in points], "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
        write_json_atomic(LOCAL, str(path), made)
        return rung, made


def data_built(mixture) -> bool:
    """Whether every source of the mixture has token shards and the mixture its tokenizer."""
    from training import storage
    from training.mixture import MixtureError

    try:
        return all(mixture.shard_files(name) for name in mixture.source_names()) and storage.is_file(mixture.tokenizer_path())
    except MixtureError:
        return False


def die_with_parent() -> None:
    """In a rung's `train`: get SIGTERM when the ladder dies, even by SIGKILL, so no rung trains on without it (its
    ranks die with it in turn) and a rerun finds no run still holding a rung's folder."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def fit_arrays(points: list[dict], column: str):
    import numpy as np

    return (np.array([p[column] for p in points], float), np.array([p["tokens"] for p in points], float),
            np.array([p["val_loss"] for p in points], float))  # fmt: skip


def median_flops_per_param_token(points: list[dict], column: str) -> float:
    """k in C = k N D for the frontier: the rungs' own FLOPs per parameter-token (6 plus attention, more for the
    non-embedding N)."""
    import numpy as np

    return float(np.median([p["flops"] / (p[column] * p["tokens"]) for p in points]))


def run_ladder(ladder: Ladder) -> dict:
    """Every step, each resumed where its output is there; OUT/fit.json and OUT/report.html at the end."""
    started = time.perf_counter()
    ladder.check_same_ladder()
    ladder.check_data(ladder.rungs)
    points = ladder.bracket(ladder.train_all(ladder.rungs))
    forecast, held = forecast_and_train(ladder, points) if ladder.spec.forecast else (None, [])
    fits = {}
    for count, column in COUNTS.items():
        counted = [p | {"params": p[column]} for p in points + held]
        fits[count] = scaling_fit.summarize(counted, budgets=ladder.spec.budget_queries,
                                            flops_per_param_token=median_flops_per_param_token(points, column))  # fmt: skip
    summary = {"mixture": ladder.spec.mixture, "count": ladder.spec.count, "counts": {"total": "Chinchilla: every parameter",
               "non_embedding": "Kaplan: without the embedding (tied with the output layer)"}, "fits": fits,
               "forecast": forecast, "rungs": points + held, "wall_seconds": round(time.perf_counter() - started, 1),
               "shape_rule": LADDER_RULE.format(aspect=ladder.spec.aspect, head_dim=ladder.spec.head_dim,
                                                 lr=learning_rate_rule(ladder.spec))}  # fmt: skip
    write_json_atomic(LOCAL, str(ladder.out / "fit.json"), summary)
    write_text_atomic(LOCAL, str(ladder.out / "report.html"), report_html(summary))
    return summary


def forecast_and_train(ladder: Ladder, points: list[dict]) -> tuple[dict, list[dict]]:
    """The held-out rung's forecast (made and written before it trains), then the rung and the forecast's error."""
    held_rung, forecast = ladder.forecast(points)
    ladder.log(f"forecast for {held_rung.name} ({forecast['params']:,} params by the {ladder.spec.count} count, "
               f"{held_rung.tokens:,} tokens, {held_rung.flops:.2e} FLOPs), made before it trains: validation loss "
               f"{forecast['predicted_loss']:.4f} [{forecast['interval'][0]:.4f}, {forecast['interval'][1]:.4f}]"
               f"{forecast_caveat(forecast)}")  # fmt: skip
    ladder.check_data([held_rung])
    held = ladder.train_all([held_rung])[0]
    measured = held["val_loss"]
    forecast |= {"measured_loss": measured, "relative_error": (forecast["predicted_loss"] - measured) / measured,
                 "measured_in_interval": forecast["interval"][0] <= measured <= forecast["interval"][1]}  # fmt: skip
    return forecast, [held]


def forecast_caveat(forecast: dict) -> str:
    """A clause after the forecast when the law it was made from is not identified; empty when it is."""
    verdict = scaling_fit.not_identified(forecast.get("identification"))
    return f"; the law it was made from is {verdict}" if verdict else ""


def report_html(summary: dict) -> str:
    """The ladder's page from its fit.json (also what `curate report LADDER_OUT` writes)."""
    from experiments.ladder_report import render

    count, forecast = summary["count"], summary["forecast"]
    preface = "" if forecast is None else (
        f"<p><b>Forecast made before the held-out rung trained</b> ({html.escape(forecast['written_at'])}, from "
        f"{len(forecast['fitted_on'])} rungs): {html.escape(forecast['run'])}, {forecast['params']:,} parameters "
        f"({forecast['count']}), {forecast['tokens']:,} tokens, {forecast['flops']:.3g} FLOPs: predicted validation loss "
        f"{forecast['predicted_loss']:.4f} [{forecast['interval'][0]:.4f}, {forecast['interval'][1]:.4f}], measured "
        f"{forecast['measured_loss']:.4f}, relative error {forecast['relative_error']:+.2%}"
        f"{html.escape(forecast_caveat(forecast))}.</p>")  # fmt: skip
    return render(summary["fits"][count], summary["rungs"], f"Ladder on {summary['mixture']} (N: {count} parameters)", preface)


LADDER_RULE = ("n_layers = round(width / {aspect}), n_heads = n_kv_heads = the most heads of >= {head_dim} dimensions "
               "dividing the width, ffn_hidden = 8/3 width (x16), tied embeddings, peak lr {lr}")
