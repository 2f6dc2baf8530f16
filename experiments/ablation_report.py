"""The ablation report: one static HTML page from OUT/results.json (every number on it is read from there)."""

import html
import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from curation.report import png_base64


def signed(interval: dict) -> str:
    return f"{interval['difference']:+.4f} [{interval['low']:+.4f}, {interval['high']:+.4f}]"


def comparison_table(results: dict) -> pd.DataFrame:
    """A row per variant: what it ran and kept, its validation loss per slice (mean of its seeds), and beside the
    base each difference with its 95% interval; accuracy with its at-chance flag and its difference."""
    rows = []
    deciding = results["deciding_slice"]
    for name, variant in results["variants"].items():
        compared = results["comparison"].get(name)
        row = {"variant": name, "stages": len(variant["stages"]), "documents kept": variant["documents"],
               "training tokens": variant["training_tokens"]}  # fmt: skip
        for slice_name, loss in results["loss"][name].items():
            row[f"loss {slice_name}"] = loss
            row[f"Δ loss {slice_name} [95%]"] = signed(compared["val_loss"][slice_name]) if compared else "-"
        row[f"resolved ({deciding})"] = ("resolved" if compared["resolved"] else "not resolved") if compared else "-"
        if compared and compared.get("documents_to_resolve"):
            row[f"resolved ({deciding})"] += f": ~{compared['documents_to_resolve']:,} {deciding} documents would (at least)"
        for benchmark, score in results["accuracy"].get(name, {}).items():
            row[f"{benchmark} acc"] = f"{score['acc']:.3f}" + (" (at chance)" if score["at_chance"] else "")
            if compared:
                interval = compared["benchmarks"][benchmark]
                row[f"Δ {benchmark} acc [95%]"] = f"{signed(interval)} {'called' if interval['called'] else 'not called'}"
            else:
                row[f"Δ {benchmark} acc [95%]"] = "-"
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


def ladder_table(ladder: dict) -> pd.DataFrame:
    """A row per pair of variants: the better one at every rung (by compute), decision accuracy, tokens to match."""
    rows = []
    for pair in ladder["pairs"]:
        first, second = pair["variants"]
        tokens = pair["at"]["tokens"]
        rows.append({"pair": f"{first} vs {second}",
                     "better at each rung (by compute)": ", ".join(order["better"] for order in pair["rungs"]),
                     "decision accuracy": pair["decision_accuracy"], "smallest rung's order holds": pair["smallest_order_holds"],
                     f"tokens of {second} to match {first}, x [95%]": multiple(pair, f"tokens_of_{second}_to_match_{first}", ladder),
                     f"tokens of {first} to match {second}, x [95%]": multiple(pair, f"tokens_of_{first}_to_match_{second}", ladder)})  # fmt: skip
    return pd.DataFrame(rows).set_index("pair")


def multiple(pair: dict, key: str, ladder: dict) -> str:
    """Tokens to match as a multiple of the largest rung's tokens, with its interval; flagged when a law it comes
    from is not identified (scaling_fit.identification)."""
    tokens = pair["at"]["tokens"]
    low, high = pair.get(f"{key}_interval", [math.nan, math.nan])
    unpinned = [name for name in pair["variants"] if not ladder["variants"][name]["identification"]["identified"]]
    flag = f" (law of {' and '.join(unpinned)} not identified)" if unpinned else ""
    return f"{pair[key] / tokens:.3g} [{low / tokens:.3g}, {high / tokens:.3g}]{flag}"


def data_scaling_lines(scaling: dict) -> list[str]:
    """Per variant its loss at each trained token count, its law, and the tokens it needs to match the base."""
    from experiments.data_scaling import describe

    lines = [f"Data scaling on the {scaling['validated_on']} slice ({scaling['documents']} documents; budget "
             f"{scaling['budget_tokens']:,} tokens; L(D) = E + B / D^beta; 95% intervals over documents and seeds):"]  # fmt: skip
    for name, variant in scaling["variants"].items():
        law = variant["law"]
        points = ", ".join(f"{point['tokens']:,}: {point['loss']:.4f}" for point in variant["points"])
        lines.append(f"  {name}: {points}; seeds' spread at the budget {variant['seed_spread']:.3f}; "
                     f"law E {law['E']:.3f}, B {law['B']:.4g}, beta {law['beta']:.3f}")  # fmt: skip
        lines += [f"    {describe(key, match)}" for key, match in variant.items() if "to_match" in key]
    return lines


def ladder_html(ladder: dict | None) -> str:
    if not ladder:
        return ""
    return ("<h2>Ladders (--ladder)</h2><p>Every variant trained on the same small ladder (IsoFLOP sets of `train "
            f"ladder`), every rung validated on the <b>{html.escape(ladder['validated_on'])}</b> slice; decision accuracy: the share of rungs whose better variant is the one better at the largest "
            "compute (DataDecide). Tokens to match: from each variant's fitted law, the tokens of one variant's data "
            "that reach the other's loss at the largest rung's size, as a multiple of that rung's tokens (inf: never "
            "at that size; the interval: independent bootstrap refits of the two laws over rungs).</p>" + ladder_table(ladder).to_html(float_format=lambda value: f"{value:.3g}"))


def render(results: dict, out: Path) -> str:
    budget, validation = results["budget"], results["validation"]
    slices = ", ".join(f"{name} {size['documents']:,} documents ({size['tokens']:,} tokens)"
                       for name, size in results["slices"].items())  # fmt: skip
    parts = [
        f"<html><head><meta charset='utf-8'><title>Ablation: {html.escape(str(out))}</title></head><body>",
        f"<h1>Ablation of {html.escape(results['base'])}</h1>",
        f"<p>{len(results['variants'])} variants on {results['inputs']} input file(s); model {html.escape(results['model'])}, "
        f"{budget['tokens']:,} tokens ({budget['steps']} steps) per run ({html.escape(budget['why'])}); validation on "
        f"{validation['documents']:,} documents ({validation['tokens']:,} tokens) held out of the input before curation; "
        f"wall time {results['wall_seconds']:.0f} s.</p>",
        f"<p>Every variant ran with seeds {results['seeds']}, seed k paired with the base's seed k. Validation slices: "
        f"{html.escape(slices)}; <b>{html.escape(results['deciding_slice'])}</b> decides (the spec's deciding_slice). "
        "Each difference (variant minus base, nats per token; accuracy) comes with its 95% interval over seeds and "
        "documents (or items), and is resolved only when the interval excludes zero. An accuracy not significantly "
        "above chance (exact binomial test, 5%) is flagged at chance, and a difference involving it is never called.</p>",
        comparison_table(results).to_html(float_format=lambda value: f"{value:.4f}"),
        ladder_html(results.get("ladder")),
        "<h2>Tokens to match (data_scaling)</h2><pre>" + html.escape("\n".join(data_scaling_lines(results["data_scaling"])))
        + "</pre>" if results.get("data_scaling") else "",
        "<h2>Curation funnel</h2>", f"<img src='data:image/png;base64,{png_base64(funnel_figure(results))}'>",
        "<h2>Validation loss</h2>", f"<img src='data:image/png;base64,{png_base64(validation_figure(results))}'>",
        "<h2>Stages of each variant</h2><ul>",
        *(f"<li>{html.escape(name)}: {html.escape(' -> '.join(v['stages']))}; taken from the base, not computed again: "
          f"{html.escape(', '.join(v['shared_with_base']) or 'none')}</li>" for name, v in results["variants"].items()),
        "</ul></body></html>",
    ]  # fmt: skip
    return "\n".join(parts)
