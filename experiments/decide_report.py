"""`curate decide`'s page: the decision-accuracy curves, each recipe's ladder with its forecast of the largest scale,
and the tables behind them, every number read from results.json."""

import html

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from curation.report import png_base64
from experiments.decision_accuracy import TRUTHS

TARGET = "target_loss"


def accuracy_table(results: dict, truth: str) -> pd.DataFrame:
    """A row per metric, a column per smaller scale: accuracy [interval] (resolved pairs)."""
    rows = {}
    for metric, decision in results["decisions"].items():
        row = {}
        for scale, found in decision[truth].items():
            width = results["scales"][int(scale)]["width"]
            if found["accuracy"] is None:
                row[f"w{width}"] = f"no resolved pair ({found['pairs_unresolved']} unresolved)"
            else:
                low, high = found["interval"]
                ties = f", {found['ties']} tied" if found["ties"] else ""
                row[f"w{width}"] = (f"{found['accuracy']:.2f} [{low:.2f}, {high:.2f}] of {found['pairs_resolved']}"
                                    f" ({found['pairs_unresolved']} apart{ties})")  # fmt: skip
        chance = decision["chance"]
        row["truths resolved (Holm; by chance)"] = (f"{chance['resolved']} of {chance['pairs']} ({chance['resolved_holm']}; "
                                                    f"{chance['expected_by_chance']:.1f})")  # fmt: skip
        rows[metric] = row
    return pd.DataFrame.from_dict(rows, orient="index")


def value_table(results: dict, metric: str = TARGET) -> pd.DataFrame:
    rows = {}
    for scale, by_recipe in results["values"][metric].items():
        width = results["scales"][int(scale)]["width"]
        for recipe, found in by_recipe.items():
            low, high = found["interval"] or (np.nan, np.nan)
            rows.setdefault(recipe, {})[f"w{width}"] = f"{found['value']:.4f} [{low:.4f}, {high:.4f}]"
    return pd.DataFrame.from_dict(rows, orient="index")


def accuracy_figure(results: dict) -> Figure:
    figure = Figure(figsize=(12, 4.5))
    axes = figure.subplots(1, 2, sharey=True)
    for axis, truth in zip(axes, TRUTHS):
        for metric, decision in results["decisions"].items():
            points = [(results["scales"][int(scale)]["flops"], found) for scale, found in decision[truth].items()
                      if found["accuracy"] is not None]  # fmt: skip
            if not points:
                continue
            x = [flops for flops, _ in points]
            y = [found["accuracy"] for _, found in points]
            error = np.array([[found["accuracy"] - found["interval"][0], found["interval"][1] - found["accuracy"]]
                              for _, found in points]).T  # fmt: skip
            axis.errorbar(x, y, yerr=error, marker="o", capsize=3, label=metric, linewidth=2 if metric == TARGET else 1)
        axis.set_xscale("log")
        axis.set_ylim(-0.05, 1.05)
        axis.set_xlabel("FLOPs of one smaller-scale run")
        axis.set_title(TRUTHS[truth])
    axes[0].set_ylabel("decision accuracy")
    axes[1].legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1))
    figure.tight_layout()
    return figure


def ladder_figure(results: dict) -> Figure:
    figure = Figure(figsize=(9, 4.5))
    axis = figure.subplots()
    flops = [scale["flops"] for scale in results["scales"]]
    values = results["values"][TARGET]
    for recipe in results["recipes"]:
        means = [values[str(i)][recipe]["value"] for i in range(len(flops))]
        bounds = [values[str(i)][recipe]["interval"] for i in range(len(flops))]
        error = np.array([[m - b[0], b[1] - m] if b else [0, 0] for m, b in zip(means, bounds)]).T
        line = axis.errorbar(flops, means, yerr=error, marker="o", capsize=3, label=recipe)[0]
        if not results["forecasts"]["made"]:
            continue
        forecast = results["forecasts"]["recipes"][recipe]
        fit = np.geomspace(flops[0], flops[-1], 30)
        scale = means[0] / flops[0] ** -forecast["exponent"]
        axis.plot(fit, scale * fit ** -forecast["exponent"], linestyle=":", color=line.get_color())
        low, high = forecast["interval"]
        axis.errorbar([flops[-1]], [forecast["predicted"]], yerr=[[forecast["predicted"] - low], [high - forecast["predicted"]]],
                      marker="D", markersize=8, markerfacecolor="none", color=line.get_color(), capsize=3, zorder=3)  # fmt: skip
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("FLOPs per run")
    axis.set_ylabel("target loss (nats per token)")
    axis.set_title("each recipe's ladder: means over seeds with 95% intervals; dotted: the power law through the "
                   "smaller scales, diamond: its forecast with its interval over seeds" if results["forecasts"]["made"]
                   else results["forecasts"]["why"], fontsize="small")  # fmt: skip
    axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    figure.tight_layout()
    return figure


def forecast_table(results: dict) -> pd.DataFrame | None:
    """A row per recipe; None where no forecast was made (too few smaller scales)."""
    if not results["forecasts"]["made"]:
        return None
    return pd.DataFrame.from_dict({recipe: {"exponent": f"{f['exponent']:.3f}", "forecast": f"{f['predicted']:.4f}",
                                            "95% interval (seeds)": f"[{f['interval'][0]:.4f}, {f['interval'][1]:.4f}]",
                                            "measured": f"{f['measured']:.4f}", "error": f"{f['relative_error']:+.2%}",
                                            "measured inside": f["measured_inside"]}
                                   for recipe, f in results["forecasts"]["recipes"].items()}, orient="index")  # fmt: skip


def deciding_line(results: dict) -> str:
    """The spec's deciding metric: its accuracy at each smaller scale against itself at the largest, in one sentence."""
    deciding, chance = results["deciding"], results["deciding"]["chance"]
    parts = []
    for scale, found in deciding["against_itself"].items():
        width = results["scales"][int(scale)]["width"]
        if found["accuracy"] is None:
            parts.append(f"w{width}: no resolved pair")
        else:
            low, high = found["interval"]
            parts.append(f"w{width}: {found['accuracy']:.2f} [{low:.2f}, {high:.2f}] of {found['pairs_resolved']} resolved pair(s)"
                         + (f", {found['ties']} tied" if found["ties"] else ""))  # fmt: skip
    return (f"Deciding metric {deciding['metric']} (named in the spec): decision accuracy against the largest scale "
            f"{'; '.join(parts)}. It resolves {chance['resolved']} of {chance['pairs']} pairs at the largest scale "
            f"({chance['resolved_holm']} after Holm's correction; {chance['expected_by_chance']:.1f} expected by chance alone).")


def search_line(found: dict, truth: str) -> str:
    """Which metric decides best at the smallest scale, for one kind of truth, chosen and reported on separate halves."""
    if found["metric"] is None:
        return f"Metric search, {truth.removeprefix('truth: ')} as truth: {found['how']}."
    low, high = found["interval"] or (float("nan"), float("nan"))
    accuracy = "no resolved pair" if found["accuracy"] is None else f"{found['accuracy']:.2f} [{low:.2f}, {high:.2f}] of {found['pairs']}"
    return (f"Metric search, {truth.removeprefix('truth: ')} as truth: {found['metric']} at the smallest scale, "
            f"{accuracy} ({found['how']}).")


def target_line(target: dict) -> str:
    """The target's own noise against its goal, in one sentence."""
    return (f"its documents alone give a recipe's target loss a half-width of {target['document_half_width']:.4f} nats "
            f"(goal {target['goal_half_width']:g}: {'met' if target['document_half_width'] <= target['goal_half_width'] else 'not met'}; "
            f"about {target['documents_for_goal']:,} documents would meet it).")


def render(results: dict) -> str:
    scales = ", ".join(f"w{s['width']}: {s['params']:,} params, {s['tokens']:,} tokens, {s['flops']:.2e} FLOPs, "
                       f"{s['seeds']} seeds" for s in results["scales"])  # fmt: skip
    headline = " ".join([deciding_line(results)] + [search_line(results["metric_search"][truth], title)
                                                    for truth, title in TRUTHS.items()])  # fmt: skip
    forecast = forecast_table(results)
    parts = [
        "<html><head><meta charset='utf-8'><title>Data decision</title></head><body>",
        f"<h1>Data decision: {len(results['recipes'])} recipes at {len(results['scales'])} scales "
        f"({results['compute_span']:.1f}x compute)</h1>",
        f"<p>Scales: {html.escape(scales)}. Target: {results['target']['documents']:,} documents, "
        f"{results['target']['tokens']:,} tokens, held out before curation; {html.escape(target_line(results['target']))} "
        f"Wall time {results.get('wall_seconds', 0):.0f} s.</p>",
        f"<p>{html.escape(headline)} A pair not resolved at the largest scale has no ground truth: it is counted apart.</p>",
        "<h2>Decision accuracy</h2>",
        f"<img src='data:image/png;base64,{png_base64(accuracy_figure(results))}'>",
    ]  # fmt: skip
    for truth, title in TRUTHS.items():
        parts += [f"<h3>{html.escape(title)}</h3>", accuracy_table(results, truth).to_html()]
    parts += [
        "<h2>Ladders and forecasts (target loss)</h2>",
        f"<img src='data:image/png;base64,{png_base64(ladder_figure(results))}'>",
        forecast.to_html() if forecast is not None else f"<p>{html.escape(results['forecasts']['why'])}</p>",
        value_table(results).to_html(),
        "<h2>Recipes</h2>", pd.DataFrame(results["recipes"]).fillna(0).to_html(),
        pd.DataFrame.from_dict(results["curated"], orient="index").to_html(), "</body></html>",
    ]  # fmt: skip
    return "\n".join(parts)
