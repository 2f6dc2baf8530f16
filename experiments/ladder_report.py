"""The ladder's page: one static HTML page from fit.json's summary and the ladder's points (every number read from them)."""

import html

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from curation.report import png_base64
from experiments.scaling_fit import Law, law_numbers, not_identified


def _by_size(points: list[dict]) -> dict[str, list[dict]]:
    sizes: dict[str, list[dict]] = {}
    for point in sorted(points, key=lambda p: (p["params"], p["tokens"])):
        sizes.setdefault(point["size"], []).append(point)
    return sizes


def _axis(figure: Figure, title: str, xlabel: str, ylabel: str):
    axis = figure.subplots()
    axis.set_title(title)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    return axis


def _legend_beside(axis, title: str) -> None:
    """A legend right of the plot: a ladder has many sizes and the curves fill the axes."""
    axis.legend(title=title, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))


def loss_flops_figure(points: list[dict]) -> Figure:
    figure = Figure(figsize=(9, 4.5))
    axis = _axis(figure, "validation loss per rung (hollow: held out of the fit)", "FLOPs", "validation loss")
    for size, rungs in _by_size(points).items():
        line = axis.plot([p["flops"] for p in rungs], [p["val_loss"] for p in rungs], marker="o", label=size)[0]
        held = [p for p in rungs if p.get("held_out")]
        axis.scatter([p["flops"] for p in held], [p["val_loss"] for p in held], s=120, facecolors="none",
                     edgecolors=line.get_color(), zorder=3)  # fmt: skip
    axis.set_xscale("log")
    _legend_beside(axis, "model size")
    figure.tight_layout()
    return figure


def isoflop_figure(summary: dict) -> Figure | None:
    groups = summary["approach2"]["groups"]
    if not groups:
        return None
    figure = Figure(figsize=(9, 4.5))
    axis = _axis(figure, "IsoFLOP curves: parabola in log N and its minimum (x: outside the sampled sizes)",
                 "parameters N", "validation loss")  # fmt: skip
    for group in groups:
        line = axis.scatter(group["params"], group["losses"], label=f"C = {group['flops']:.3g}")
        curve = np.geomspace(min(group["params"]), max(group["params"]), 50)
        axis.plot(curve, np.polyval(group["parabola"], np.log(curve)), color=line.get_facecolor()[0])
        axis.scatter([group["N_opt"]], [group["L_opt"]], marker="*" if group["inside"] else "x", s=160,
                     color=line.get_facecolor()[0], edgecolors="black", zorder=3)  # fmt: skip
    axis.set_xscale("log")
    _legend_beside(axis, "compute group")
    figure.tight_layout()
    return figure


def law_figure(summary: dict, points: list[dict]) -> Figure:
    law = Law(**summary["law"])
    figure = Figure(figsize=(9, 4.5))
    axis = _axis(figure, f"fitted law L = E + A/N^alpha + B/D^beta (N: {summary['n_used']})", "training tokens D",
                 "validation loss")  # fmt: skip
    for size, rungs in _by_size(points).items():
        tokens = [p["tokens"] for p in rungs]
        line = axis.scatter(tokens, [p["val_loss"] for p in rungs], label=size)
        curve = np.geomspace(min(tokens) / 2, max(tokens) * 2, 50)
        axis.plot(curve, law.loss(rungs[0]["params"], curve), color=line.get_facecolor()[0])
    axis.set_xscale("log")
    _legend_beside(axis, "model size")
    figure.tight_layout()
    return figure


def frontier_figure(summary: dict) -> Figure:
    frontier, groups = law_numbers(summary["frontier"])["points"], summary["approach2"]["groups"]
    flops = [row["flops"] for row in frontier]
    figure = Figure(figsize=(11, 4.5))
    for axis, key, name in zip(figure.subplots(1, 2), ("params", "tokens"), ("N*", "D*")):
        axis.plot(flops, [row[key] for row in frontier], label=f"{name}(C), Approach 3")
        axis.fill_between(flops, *zip(*(row[f"{key}_interval"] for row in frontier)), alpha=0.3, label="95% interval")
        minima = [group for group in groups if group["inside"]]
        axis.scatter([g["flops"] for g in minima], [g["N_opt" if key == "params" else "D_opt"] for g in minima],
                     marker="*", s=120, color="black", label="IsoFLOP minima (Approach 2)", zorder=3)  # fmt: skip
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("compute C (FLOPs)")
        axis.set_title(f"compute-optimal {name}")
        axis.legend()
    figure.tight_layout()
    return figure


def forecast_figure(summary: dict) -> Figure | None:
    rows = summary["forecast"]
    if not rows:
        return None
    figure = Figure(figsize=(6, 4))
    axis = _axis(figure, "held-out rungs: forecast (95% interval) against measured", "run", "validation loss")
    places = np.arange(len(rows))
    predicted = np.array([row["predicted"] for row in rows])
    low, high = np.array([row["interval"] for row in rows]).T
    axis.errorbar(places, predicted, yerr=[predicted - low, high - predicted], fmt="o", capsize=6, label="forecast")
    axis.scatter(places, [row["measured"] for row in rows], marker="x", s=100, color="black", label="measured", zorder=3)
    axis.set_xticks(places, [row["run"] for row in rows])
    axis.legend()
    figure.tight_layout()
    return figure


def interval_text(values) -> str:
    return f"[{values[0]:.4g}, {values[1]:.4g}]"


def law_table(summary: dict) -> pd.DataFrame:
    return pd.DataFrame([{"parameter": name, "fit": f"{value:.4g}", "95% interval": interval_text(summary["intervals"][name])}
                         for name, value in summary["law"].items()]).set_index("parameter")  # fmt: skip


def forecast_table(summary: dict) -> pd.DataFrame:
    return pd.DataFrame([{"run": row["run"], "params": f"{row['params']:.4g}", "tokens": f"{row['tokens']:.4g}",
                          "measured": f"{row['measured']:.4f}", "predicted": f"{row['predicted']:.4f}",
                          "95% interval": interval_text(row["interval"]),
                          "relative error": f"{row['relative_error']:+.2%}"} for row in summary["forecast"]])  # fmt: skip


def budget_table(summary: dict) -> pd.DataFrame:
    """A row per budget; one the law does not answer (not identified) shows its numbers marked as not an answer."""
    rows = []
    for row in summary["budgets"]:
        numbers = law_numbers(row)
        rows.append({"FLOPs": f"{row['flops']:.3g}" + ("" if row["identified"] else " (not an answer: law not identified)"),
                     "params N": f"{numbers['params']:.4g}", "N interval": interval_text(numbers["params_interval"]),
                     "tokens D": f"{numbers['tokens']:.4g}", "D interval": interval_text(numbers["tokens_interval"]),
                     "tokens per param": f"{numbers['tokens_per_param']:.4g}",
                     "loss": f"{numbers['loss']:.4f}", "loss interval": interval_text(numbers["loss_interval"])})  # fmt: skip
    return pd.DataFrame(rows)


def _approach2_html(summary: dict) -> str:
    approach2, disagreement = summary["approach2"], summary["disagreement"]
    if "why" in disagreement:
        return f"<p>Approach 2 (IsoFLOP parabolas) not fitted: {html.escape(disagreement['why'])}.</p>"
    return (f"<p>Approach 2 (IsoFLOP parabolas, {approach2['groups_used']} compute groups): N_opt &prop; C^{approach2['a']:.4f}, "
            f"D_opt &prop; C^{approach2['b']:.4f}. Approach 3 gives N* &prop; C^{disagreement['a_approach3']:.4f} "
            f"(difference {disagreement['a_difference']:+.4f}). Tokens per parameter at C = {disagreement['at_flops']:.3g}: "
            f"{disagreement['tokens_per_param_approach2']:.4g} (Approach 2) against "
            f"{disagreement['tokens_per_param_approach3']:.4g} (Approach 3), ratio "
            f"{disagreement['tokens_per_param_ratio']:.3f}.</p>")  # fmt: skip


def _image(figure: Figure | None) -> str:
    return f"<img src='data:image/png;base64,{png_base64(figure)}'>" if figure is not None else "<p>not in this ladder</p>"


def compute_optimal_html(optimal: dict) -> str:
    """The compute-optimal split with its interval; withheld where the law is not identified."""
    if not optimal["identified"]:
        return "<p>Compute-optimal split: not given, the law is not identified (fit.json keeps its numbers under unidentified_law_numbers).</p>"
    return (f"<p>Compute-optimal N* &prop; C^{optimal['a']:.4f}, D* &prop; C^{optimal['b']:.4f}; at C = "
            f"{optimal['at_flops']:.3g}, {optimal['tokens_per_param']:.4g} tokens per parameter, 95% interval "
            f"{interval_text(optimal['tokens_per_param_interval'])}.</p>")


def render(summary: dict, points: list[dict], title: str, preface: str = "") -> str:
    """`preface`: HTML the caller puts first (the ladder's forecast as it was made before its rung trained)."""
    verdict = not_identified(summary.get("identification"))
    parts = [
        f"<html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>",
        f"<h1>{html.escape(title)}</h1>", preface,
        f"<p><b>The fitted law is {html.escape(verdict)}</b>: its frontier and budgets are its numbers, not answers.</p>"
        if verdict else "",
        f"<p>{html.escape(summary['note'])} {summary['points_fitted']} points fitted; held out: "
        f"{html.escape(', '.join(summary['held_out']) or 'none')}; {summary['bootstrap_samples']} bootstrap samples.</p>",
        "<h2>Validation loss against compute</h2>", _image(loss_flops_figure(points)),
        "<h2>Fitted law (Approach 3: Huber on log residuals, L-BFGS from a grid of starts)</h2>",
        law_table(summary).to_html(), _image(law_figure(summary, points)),
        compute_optimal_html(summary["compute_optimal"]),
        "<h2>IsoFLOP curves</h2>", _image(isoflop_figure(summary)), _approach2_html(summary),
        "<h2>Compute-optimal frontier</h2>",
        _image(frontier_figure(summary)) if summary["frontier"]["identified"] else "<p>not drawn: the law is not identified</p>",
        "<h2>Forecast of the held-out rungs</h2>", _image(forecast_figure(summary)),
        forecast_table(summary).to_html(index=False) if summary["forecast"] else "",
        "<h2>Budgets</h2>", budget_table(summary).to_html(index=False),
        "</body></html>",
    ]  # fmt: skip
    return "\n".join(parts)
