"""What compute span would identify a ladder's law: points drawn from a known law at the rungs a cpu ladder would
train over wider and wider spans, fitted as `train ladder` fits them, and how often the fit is identified.

    python benchmarks/law_span.py --ladder runs/ladder-fineweb-30x [--spans 4,30,100,1000,10000] [--draws 12]
        [--sigma 0.01]

The law drawn from is the ladder's own fit (fit.json; a law not identified is still the best point estimate) and the
noise, unless --sigma gives it, is the RMS of the ladder's log residuals about that fit (its seeds' noise and any misfit
together). At each span the budgets run geometrically from the ladder's smallest over `span` times it (as many as the
ladder has); each budget trains the 5 widths of the cpu shape rule (multiples of 8) nearest its law-optimal size, as
the ladder's bracketing would find them, and a held-out rung at the ladder's factor. Prints a markdown row per span:
budgets, rungs, FLOPs and their time on 2 cores at the cpu preset's planning rate, the share of fits identified, the
median spread (high / low) of the 95% intervals of alpha, beta and E, the coverage of the true values, and the
reasons a fit is not identified, most frequent first.
"""

import argparse
import json
import math
import time
from collections import Counter
from pathlib import Path

import numpy as np

from experiments import scaling_fit
from experiments.ladder import LadderSpec, drawn_points, make_rung, model_size
from experiments.plan_checks import PRESET_RANGES

CANDIDATE_WIDTHS = [8 * k for k in range(1, 129)]  # 8 .. 1024


def nearest_widths(target_params: float, sizes: dict, count: int = 5) -> list[int]:
    """The `count` widths whose total parameters lie nearest `target_params` in log space."""
    ranked = sorted(CANDIDATE_WIDTHS, key=lambda width: abs(math.log(sizes[width] / target_params)))
    return sorted(ranked[:count])


def ladder_law(folder: Path) -> tuple[scaling_fit.Law, LadderSpec, list[dict], float]:
    """The ladder's fitted law (N total), its spec, its rungs and the RMS of their log residuals about the law."""
    fit = json.loads((folder / "fit.json").read_text())
    spec = LadderSpec(**json.loads((folder / "ladder.json").read_text()))
    law, points = scaling_fit.Law(**fit["fits"]["total"]["law"]), fit["rungs"]
    fitted = [p for p in points if not p.get("held_out")]
    residuals = [math.log(p["val_loss"] / law.loss(p["params_total"], p["tokens"])) for p in fitted]
    return law, spec, points, float(np.sqrt(np.mean(np.square(residuals))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ladder", default="runs/ladder-fineweb-30x", help="a finished `train ladder` folder")
    parser.add_argument("--spans", default="4,30,100,1000,10000")
    parser.add_argument("--draws", type=int, default=12)
    parser.add_argument("--sigma", type=float, help="lognormal noise of each rung's loss (default: the ladder's residuals)")
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=100, help="bootstrap refits per fit")
    args = parser.parse_args()
    law, spec, points, residual = ladder_law(Path(args.ladder))
    sigma = args.sigma if args.sigma is not None else residual
    k = float(np.median([p["flops"] / (p["params_total"] * p["tokens"]) for p in points]))
    print(f"law: E {law.E:.4g}, A {law.A:.4g}, alpha {law.alpha:.4g}, B {law.B:.4g}, beta {law.beta:.4g}; noise sigma "
          f"{sigma:.4f} ({'given' if args.sigma is not None else 'RMS log residual of the ladder about its fit'}); "
          f"k {k:.3g} FLOPs per parameter-token; {args.draws} draws per span, {args.samples} bootstrap refits each")  # fmt: skip
    sizes = {width: model_size(spec, width, args.vocab)[0] for width in CANDIDATE_WIDTHS}
    print("\n| span | budgets | rungs | FLOPs | on 2 cores | identified | alpha spread | beta spread | E spread | "
          "coverage alpha / beta / E | reasons not identified (share of fits) |\n|---|---|---|---|---|---|---|---|---|---|---|")
    smallest = min(spec.budgets)
    for span in [float(s) for s in args.spans.split(",")]:
        started = time.perf_counter()
        budgets = np.geomspace(smallest, smallest * span, len(spec.budgets))
        rungs = [make_rung(spec, width, C, args.vocab) for C in budgets
                 for width in nearest_widths(law.optimal(C, k)[0], sizes)]  # fmt: skip
        held_C = budgets[-1] * spec.holdout_factor
        held_width = nearest_widths(law.optimal(held_C, k)[0], sizes, count=1)[0]
        rungs.append(make_rung(spec, held_width, held_C, args.vocab, held_out=True))
        rows, reasons = [], Counter()
        for draw in range(args.draws):
            drawn = drawn_points(law, rungs, sigma, np.random.default_rng(draw))
            summary = scaling_fit.summarize(drawn, budgets=[held_C], samples=args.samples, seed=draw)
            found = summary["intervals"]
            truths = {"alpha": law.alpha, "beta": law.beta, "E": law.E}
            spreads = [found[name][1] / found[name][0] if found[name][0] > 0 else math.inf for name in truths]
            covered = [found[name][0] <= value <= found[name][1] for name, value in truths.items()]
            rows.append([summary["identification"]["identified"], *spreads, *covered])
            reasons.update({reason.split(" ")[0] if "interval" not in reason else reason.split("'")[0] + " interval"
                            for reason in summary["identification"]["reasons"]})  # fmt: skip
        rows = np.array(rows, dtype=float)
        flops = sum(r.flops for r in rungs)
        said = "; ".join(f"{name} {count / args.draws:.0%}" for name, count in reasons.most_common(4)) or "-"
        spread = [f"{np.median(rows[:, i]):.3g}" for i in (1, 2, 3)]
        print(f"| {span:g}x | {budgets[0]:.2g}-{budgets[-1]:.2g} | {len(rungs)} | {flops:.2e} | "
              f"{flops / PRESET_RANGES['cpu'].flops_per_second / 3600:.1f} h | {rows[:, 0].mean():.0%} | {' | '.join(spread)} | "
              f"{rows[:, 4].mean():.2f} / {rows[:, 5].mean():.2f} / {rows[:, 6].mean():.2f} | {said} |", flush=True)  # fmt: skip
        print(f"<!-- {span:g}x: widths {sorted({r.width for r in rungs})}, {time.perf_counter() - started:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
