"""How far apart one recipe's seeds land, and what narrows it: each change to the cpu ladder preset's training rule,
one at a time, trained on several seeds at a small and a large width, scored on the mixture's validation split (the
curated training data's own held-out rows, never a decision's target).

    python benchmarks/seed_noise.py [--mixture mixtures/ladder_code.yaml] [--widths 20,48] [--seeds 0,1,2]
        [--tokens-per-param 10] [--changes baseline,lr=2e-3,...] [--out /tmp/seed-noise]

Needs the mixture's token shards (for the default: `curate run code-corpus --max-files 35 --output runs/ladder-code
&& curate tokenize runs/ladder-code --vocab-size 2048`). A change is `field=value` of the ladder spec (lr, lr_width,
global_batch, warmup_fraction, min_lr_ratio, z_loss, qk_norm, init_std, optimizer, moe_experts) or
`tokens_per_param=value`, several joined by `+` (`init_std=null+warmup_fraction=0.2`); `baseline` is the preset as it
is. Prints a markdown row per change: the seeds' spread (max - min) and mean of the validation loss at each width,
its difference from the first change given (the baseline) with a 95% interval over seeds (paired by seed: seed k of
both starts from the same init and data order; Student's t with seeds - 1 degrees of freedom; both score the same
validation sequences, whose own sampling noise is not in it), and the wall time of its runs. Tokens per parameter
count the dense model's parameters, so an MoE change (`moe_experts=8`: top 2 of experts half the FFN's width, the
dense model's active parameters) trains the same tokens as the baseline. Runs are kept under --out: a rerun resumes.
"""

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CHANGES = "baseline,lr=2e-3,lr=1e-3,global_batch=32,warmup_fraction=0.2,min_lr_ratio=0.0,z_loss=1e-4,tokens_per_param=20"


def parse_change(change: str) -> tuple[dict, float | None]:
    """(ladder-spec overrides, tokens per parameter or None) of one change: `baseline`, or `field=value` joined by +."""
    overrides, tokens_per_param = {}, None
    for part in change.split("+") if change != "baseline" else []:
        field, _, value = part.partition("=")
        if field == "tokens_per_param":
            tokens_per_param = float(yaml.safe_load(value))
        else:
            overrides[field] = yaml.safe_load(value)
    return overrides, tokens_per_param


def main() -> None:
    from experiments.ladder import PRESETS, Ladder, LadderSpec, make_rung, model_size

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mixture", default="mixtures/ladder_code.yaml")
    parser.add_argument("--widths", default="20,48")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--tokens-per-param", type=float, default=10.0)
    parser.add_argument("--changes", default=DEFAULT_CHANGES)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--out", default="/tmp/seed-noise")
    args = parser.parse_args()
    widths, seeds = [int(w) for w in args.widths.split(",")], [int(s) for s in args.seeds.split(",")]
    header = " | ".join(f"w{w} spread | w{w} mean | w{w} seeds | w{w} vs first [95%]" for w in widths)
    print(f"| change | {header} | wall s |\n|---|{'---|---|---|---|' * len(widths)}---|", flush=True)
    first = None
    for change in args.changes.split(","):
        overrides, tokens_per_param = parse_change(change)
        started, losses = time.perf_counter(), {width: [] for width in widths}
        jobs = []
        for seed in seeds:
            spec = LadderSpec(**(PRESETS["cpu"] | {"mixture": args.mixture, "seed": seed, "forecast": False,
                                                   "parallel": args.parallel} | overrides))  # fmt: skip
            ladder = Ladder(spec, str(Path(args.out) / f"{change}-seed{seed}"), log=lambda line: None)
            ladder.check_same_ladder()
            for width in widths:
                total = model_size(spec.model_copy(update={"moe_experts": 0}), width, ladder.vocab)[0]
                per_token = model_size(spec, width, ladder.vocab)[2]
                budget = (tokens_per_param or args.tokens_per_param) * total * per_token
                jobs.append((ladder, make_rung(spec, width, budget, ladder.vocab)))
        with ThreadPoolExecutor(args.parallel) as pool:
            results = list(pool.map(lambda job: job[0].train(job[1], threads=1), jobs))
        for (_, rung), result in zip(jobs, results):
            losses[rung.width].append(result["val_loss"])
        first = first or losses
        cells = " | ".join(f"{np.ptp(losses[w]):.3f} | {np.mean(losses[w]):.3f} | {', '.join(f'{v:.3f}' for v in losses[w])} | "
                           f"{paired_difference(losses[w], first[w])}" for w in widths)  # fmt: skip
        print(f"| {change} | {cells} | {time.perf_counter() - started:.0f} |", flush=True)


def paired_difference(ours: list[float], theirs: list[float]) -> str:
    """Mean of ours - theirs, seed by seed, with its 95% t-interval over seeds; `-` against itself or with one seed."""
    differences = np.subtract(ours, theirs)
    if len(differences) < 2 or not differences.any():
        return "-"
    half = stats.t.ppf(0.975, len(differences) - 1) * differences.std(ddof=1) / np.sqrt(len(differences))
    return f"{differences.mean():+.3f} [{differences.mean() - half:+.3f}, {differences.mean() + half:+.3f}]"


if __name__ == "__main__":
    main()
