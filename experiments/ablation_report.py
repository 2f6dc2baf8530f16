"""The ablation report: one static HTML page from OUT/results.json (every number on it is read from there)."""

import html
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from curation.report import png_base64


def comparison_table(results: dict) -> pd.DataFrame:
    """A row per variant: what it ran, what it kept, and how it scored beside the base (mean of its seeds)."""
    rows = []
    benchmarks = sorted({name for run in results["runs"].values() for name in run["benchmarks"]})
    for name, variant in results["variants"].items():
        runs = [run for run in results["runs"].values() if run["variant"] == name]
        row = {"variant": name, "stages": len(variant["stages"]), "documents kept": variant["documents"],
               "training tokens": variant["training_tokens"], "seeds": len(runs),
               "final val loss": sum(run["val_loss"] for run in runs) / len(runs)}  # fmt: skip
        compared = results["comparison"].get(name)
        row["val loss - base"] = compared["val_loss"]["delta"] if compared else 0.0
        row["beyond seed noise"] = ("yes" if compared["val_loss"]["exceeds_noise"] else "no") if compared else "-"
        for benchmark in benchmarks:
            scores = [run["benchmarks"][benchmark] for run in runs]
            low, high = scores[0]["acc_interval"]
            row[f"{benchmark} acc"] = f"{sum(s['acc'] for s in scores) / len(scores):.3f} [{low:.3f}, {high:.3f}]"
            row[f"{benchmark} beyond noise"] = ("yes" if compared[f"{benchmark}.acc"]["exceeds_noise"] else "no") if compared else "-"
        rows.append(row)
    return pd.DataFrame(rows).set_index("variant")


def funnel_figure(results: dict) -> Figure:
    figure = Figure(figsize=(11, 4))
    axis = figure.subplots()
    for name, variant in results["variants"].items():
        stages = [row["stage"] for row in variant["funnel"]]
        axis.plot(stages, [row["docs_out"] for row in variant["funnel"]], marker="o", label=name)
    axis.set_title("documents after each stage")
    axis.tick_params(axis="x", rotation=45)
    axis.legend()
    figure.tight_layout()
    return figure


def validation_figure(results: dict) -> Figure:
    figure = Figure(figsize=(11, 4))
    axis = figure.subplots()
    for name, run in results["runs"].items():
        steps, losses = zip(*run["curve"]) if run["curve"] else ((), ())
        axis.plot(steps, losses, marker=".", label=name, linestyle="--" if run["variant"] == "base" else "-")
    axis.set_title("validation loss on the common held-out documents")
    axis.set_xlabel("step")
    axis.legend()
    figure.tight_layout()
    return figure


def render(results: dict, out: Path) -> str:
    budget, validation = results["budget"], results["validation"]
    noise = ", ".join(f"{metric} {value:.4f}" for metric, value in results["noise"].items())
    parts = [
        f"<html><head><meta charset='utf-8'><title>Ablation: {html.escape(str(out))}</title></head><body>",
        f"<h1>Ablation of {html.escape(results['base'])}</h1>",
        f"<p>{len(results['variants'])} variants on {results['inputs']} input file(s); model {html.escape(results['model'])}, "
        f"{budget['tokens']:,} tokens ({budget['steps']} steps) per run ({html.escape(budget['why'])}); validation on "
        f"{validation['documents']:,} documents ({validation['tokens']:,} tokens) held out of the input before curation; "
        f"wall time {results['wall_seconds']:.0f} s.</p>",
        f"<p>Seed-to-seed noise (largest difference between the base's seeds): {html.escape(noise)}. A variant's "
        "difference from the base's mean counts as real only beyond it.</p>",
        comparison_table(results).to_html(float_format=lambda value: f"{value:.4f}"),
        "<h2>Curation funnel</h2>", f"<img src='data:image/png;base64,{png_base64(funnel_figure(results))}'>",
        "<h2>Validation loss</h2>", f"<img src='data:image/png;base64,{png_base64(validation_figure(results))}'>",
        "<h2>Stages of each variant</h2><ul>",
        *(f"<li>{html.escape(name)}: {html.escape(' -> '.join(v['stages']))}; taken from the base, not computed again: "
          f"{html.escape(', '.join(v['shared_with_base']) or 'none')}</li>" for name, v in results["variants"].items()),
        "</ul></body></html>",
    ]  # fmt: skip
    return "\n".join(parts)
