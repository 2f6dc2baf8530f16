"""Per-core speed of the code-corpus recipe, stage by stage, against the recipe before issue 27 (StarCoder's
filters alone, the named baseline) in the same run: one process, no Ray, every stage warm (set up once, then timed
over `--repeat` passes), so the figures are what one core does in a long run.

    python benchmarks/code_corpus_speed.py [INPUT ...] [--inputs 24] [--repeat 2] [--json out.json]

Default input: every `--step`-th repository of `curate run code-corpus`'s default corpus (this Python's standard
library and the project's installed distributions). Per stage: files in, MB in, seconds per pass, files/s, MB/s
and the share of the recipe's time; per-repository stages (license) also per repository. The dedup stages are timed
on their per-document half (candidate keys); their corpus-wide pass is in `curate run`'s stats.
"""

import argparse
import json
import time
from pathlib import Path

import pyarrow.compute as pc

from curation.recipe import load_recipe
from curation.sources.code_repositories import default_inputs
from curation.sources.readers import read_input
from per_core_rates import run_stage


def megabytes(tables) -> float:
    return sum((pc.sum(pc.binary_length(t["text"])).as_py() or 0) for t in tables if t.num_rows) / 1e6


def timed_pass(recipe, stages, inputs) -> tuple[dict, int]:
    rows = {}
    started = time.perf_counter()
    tables = [read_input(recipe.source, "speed", path).table for path in inputs]
    rows["read"] = {"files": sum(t.num_rows for t in tables), "mb": megabytes(tables), "seconds": time.perf_counter() - started}
    repositories = len({r for t in tables for r in t["repository"].to_pylist()})
    for stage in stages:
        row = rows[stage.name] = {"files": sum(t.num_rows for t in tables), "mb": megabytes(tables)}
        started = time.perf_counter()
        tables = run_stage(stage, tables)
        row["seconds"] = time.perf_counter() - started
    return rows, repositories


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="*", help="repositories (default: a spread of the default corpus)")
    parser.add_argument("--step", type=int, default=6, help="take every STEP-th default repository")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    inputs = args.inputs or default_inputs()[:: args.step]
    recipe = load_recipe("code-corpus")
    stages = [recipe.build(index) for index in range(len(recipe.stages))]
    baseline = [stage for stage in stages if stage.name == "code_filters"]
    for stage in stages:
        stage.ready()
    totals, base = {}, {}
    for _ in range(args.repeat):
        rows, repositories = timed_pass(recipe, stages, inputs)
        for name, row in rows.items():
            total = totals.setdefault(name, {"files": row["files"], "mb": row["mb"], "seconds": 0.0})
            total["seconds"] += row["seconds"] / args.repeat
        rows, _ = timed_pass(recipe, baseline, inputs)
        for name, row in rows.items():
            base.setdefault(name, {"seconds": 0.0})["seconds"] += row["seconds"] / args.repeat
    recipe_seconds = sum(row["seconds"] for row in totals.values())
    print(f"{len(inputs)} repositories ({repositories} named), {totals['read']['files']:,} files read, one core, "
          f"{args.repeat} warm pass(es)")  # fmt: skip
    print(f"{'stage':<22}{'files in':>9}{'MB in':>8}{'s/pass':>9}{'files/s':>9}{'MB/s':>7}{'share':>7}{'ms/repo':>9}")
    for name, row in totals.items():
        row["files_per_s"] = row["files"] / row["seconds"] if row["seconds"] else float("inf")
        print(f"{name:<22}{row['files']:>9,}{row['mb']:>8.1f}{row['seconds']:>9.3f}{row['files_per_s']:>9,.0f}"
              f"{row['mb'] / row['seconds']:>7.1f}{row['seconds'] / recipe_seconds:>7.1%}{1000 * row['seconds'] / repositories:>9.1f}")  # fmt: skip
    files = totals["read"]["files"]
    before = sum(row["seconds"] for row in base.values())
    print(f"whole recipe: {files / recipe_seconds:,.0f} files read per second per core "
          f"({totals['read']['mb'] / recipe_seconds:.2f} MB/s); baseline (read + StarCoder filters only, the recipe before "
          f"issue 27): {files / before:,.0f} files/s; the recipe costs {recipe_seconds / before:.2f}x the baseline")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"inputs": inputs, "stages": totals, "baseline": base}, indent=1))


if __name__ == "__main__":
    main()
