"""What compute span would identify a ladder's law: points drawn from a known law at the rungs a cpu ladder would
train over wider and wider spans, fitted as `train ladder` fits them, and how often the fit is identified.

    python benchmarks/law_span.py --ladder runs/ladder-fineweb-30x [--from-budget 3e11] [--spans 4,10,30,100]
        [--draws 12] [--sigma 0.01]

First the ladder's own rungs: `train ladder`'s fit of all of them, without each budget and without its shortest rungs
(RMS log residual, alpha, beta and E with 95% intervals, identified or why not). Then the law drawn from: the fit of
the rungs at --from-budget and above (a law not identified is still the best point estimate), with noise, unless
--sigma gives it, the RMS of those rungs' log residuals about it (their seeds' noise and any misfit together), and
the rungs furthest from it. At each span the budgets run geometrically from --from-budget over `span` times it (as
many as the ladder has); each budget trains the widths of the cpu shape rule (multiples of 8) nearest 5 sizes spread
16x around its law-optimal size (fewer where width 8, the smallest, is nearest more than one), and a held-out rung at
the ladder's factor. Prints a markdown row per span: budgets, rungs, FLOPs and their time on 2 cores at the cpu
preset's planning rate, the share of fits identified, the median spread (high / low) of the 95% intervals of alpha,
beta and E, the coverage of the true values, and the reasons a fit is not identified, most frequent first.
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
SHORT_RUN = 200  # steps: a rung shorter than this spends a tenth of its steps or more in warmup plus the first decay


def nearest_widths(target_params: float, sizes: dict, count: int = 5) -> list[int]:
    """The widths whose total parameters lie nearest `count` sizes spread 16x around `target_params` in log space
    (each width once), as IsoFLOP sets are laid out."""
    factors = np.geomspace(1 / 4, 4, count) if count > 1 else [1.0]
    nearest = lambda params: min(CANDIDATE_WIDTHS, key=lambda width: abs(math.log(sizes[width] / params)))  # noqa: E731
    return sorted({nearest(target_params * factor) for factor in factors})


def reason_key(reason: str) -> str:
    """A short name for one of `scaling_fit.identification`'s reasons."""
    if "interval" in reason:
        return reason.split("'")[0] + " interval"
    if reason.startswith("only"):
        return "a group's minimum unbracketed"
    if reason.startswith("the points cannot separate"):
        return "inseparable"
    return reason.split(" ")[0] + " at a bound"


def subset_row(points: list[dict], samples: int) -> str:
    """How `train ladder`'s fit of these points comes out: its residual, intervals and identification."""
    summary = scaling_fit.summarize([p | {"params": p["params_total"]} for p in points], samples=samples)
    law, found = scaling_fit.Law(**summary["law"]), summary["intervals"]
    residual = np.sqrt(np.mean([math.log(p["val_loss"] / law.loss(p["params_total"], p["tokens"])) ** 2 for p in points]))
    cells = [f"{getattr(law, name):.3g} [{found[name][0]:.3g}, {found[name][1]:.3g}]" for name in ("alpha", "beta", "E")]
    verdict = "yes" if summary["identification"]["identified"] else "no: " + ", ".join(
        sorted({reason_key(reason) for reason in summary["identification"]["reasons"]}))  # fmt: skip
    return f"{len(points)} | {residual:.4f} | {' | '.join(cells)} | {verdict}"


def ladder_points(folder: Path) -> tuple[LadderSpec, list[dict]]:
    """The ladder's spec and its IsoFLOP rungs' results (the held-out rung, when there, left out)."""
    spec = LadderSpec(**json.loads((folder / "ladder.json").read_text()))
    points = [json.loads(path.read_text()) for path in sorted((folder / "results").glob("*.json"))]
    return spec, [p for p in points if not p["held_out"]]


def fitted_law(points: list[dict]) -> tuple[scaling_fit.Law, float]:
    """The law `train ladder` fits to these points (N total) and the RMS of their log residuals about it."""
    N, D, L = (np.array([p[key] for p in points], float) for key in ("params_total", "tokens", "val_loss"))
    law = scaling_fit.fit_law(N, D, L)
    return law, float(np.sqrt(np.mean(np.log(L / law.loss(N, D)) ** 2)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ladder", default="runs/ladder-fineweb-30x", help="a finished `train ladder` folder")
    parser.add_argument("--spans", default="4,10,30,100")
    parser.add_argument("--draws", type=int, default=12)
    parser.add_argument("--sigma", type=float, help="lognormal noise of each rung's loss (default: the ladder's residuals)")
    parser.add_argument("--from-budget", type=float, help="draw from the law of the rungs at this budget and above, and "
                        "start every span there (default: the ladder's smallest budget)")  # fmt: skip
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=100, help="bootstrap refits per fit")
    args = parser.parse_args()
    spec, points = ladder_points(Path(args.ladder))
    print("| rungs fitted | points | RMS log residual | alpha [95%] | beta [95%] | E [95%] | identified |\n|---|---|---|---|---|---|---|")
    subsets = {"all": points} | {f"without {C:.0e} FLOPs": [p for p in points if p["budget"] != C] for C in spec.budgets}
    subsets[f"without rungs under {SHORT_RUN} steps"] = [p for p in points if p["steps"] >= SHORT_RUN]
    for name, subset in subsets.items():
        print(f"| {name} | {subset_row(subset, args.samples)} |", flush=True)
    smallest = args.from_budget or min(spec.budgets)
    points = [p for p in points if p["budget"] >= smallest * 0.999]
    law, residual = fitted_law(points)
    sigma = args.sigma if args.sigma is not None else residual
    k = float(np.median([p["flops"] / (p["params_total"] * p["tokens"]) for p in points]))
    print(f"\nlaw of the rungs at {smallest:.0e} FLOPs and above: E {law.E:.4g}, A {law.A:.4g}, alpha {law.alpha:.4g}, "
          f"B {law.B:.4g}, beta {law.beta:.4g}; noise sigma {sigma:.4f} "
          f"({'given' if args.sigma is not None else 'RMS log residual of those rungs about it'}); k {k:.3g} FLOPs per "
          f"parameter-token; {args.draws} draws per span, {args.samples} bootstrap refits each")  # fmt: skip
    worst = sorted(points, key=lambda p: -abs(math.log(p["val_loss"] / law.loss(p["params_total"], p["tokens"]))))
    print("rungs furthest from it: " + "; ".join(
        f"{p['run']} {p['val_loss']:.3f} against {law.loss(p['params_total'], p['tokens']):.3f}" for p in worst[:5]))  # fmt: skip
    sizes = {width: model_size(spec, width, args.vocab)[0] for width in CANDIDATE_WIDTHS}
    print("\n| span | budgets | rungs | FLOPs | on 2 cores | identified | alpha spread | beta spread | E spread | "
          "coverage alpha / beta / E | reasons not identified (share of fits) |\n|---|---|---|---|---|---|---|---|---|---|---|")
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
            reasons.update({reason_key(reason) for reason in summary["identification"]["reasons"]})
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
