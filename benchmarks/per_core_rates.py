"""Per-core rate of each FineWeb stage on given WARC files: one process, no Ray, every stage warm (set up once, then
timed over `--repeat` passes), so the figures are what one core does in a long run. docs/scaling.md turns them into
cores x hours for a whole Common Crawl snapshot.

    python benchmarks/per_core_rates.py [WARC ...] [--backend resiliparse|trafilatura|resiliparse_blocks] [--repeat 3] [--json out.json]

Default input: the real Common Crawl and wget WARC slices in ../shared/data/warc/. Per stage it prints documents in,
megabytes in (compressed input for read, HTML for url_filter and extract, text after), seconds per pass, documents
per second, MB per second and milliseconds per input page (what the stage costs each page read); the dedup stages are timed on their per-document half (candidate keys), which is
nearly all of their work (their corpus-wide pass is in the `pass` rows of `curate run`'s stats).
"""

import argparse
import json
import time
from pathlib import Path

import pyarrow.compute as pc

from curation.recipe import load_recipe
from curation.sources.readers import read_input
from filters.duplicates import DuplicateFilter

SHARED_WARC = Path(__file__).resolve().parents[2] / "shared" / "data" / "warc"
STAGES = ("url_filter", "extract", "langid", "heuristics", "dedup_exact", "minhash")


def run_stage(stage, tables: list) -> list:
    """The kept tables after one stage; a dedup stage runs its per-document half (candidate keys), tables unchanged."""
    if isinstance(stage, DuplicateFilter):
        for table in tables:
            stage.candidate_keys(table)
        return tables
    return [stage.process(table).kept for table in tables]


def megabytes(table) -> float:
    column = "html" if "html" in table.column_names and table["html"].null_count < table.num_rows else "text"
    return (pc.sum(pc.binary_length(table[column])).as_py() or 0) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="*", help="WARC files (default: ../shared/data/warc/*.warc.gz)")
    parser.add_argument("--backend", default="resiliparse", choices=["resiliparse", "trafilatura", "resiliparse_blocks"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    inputs = args.inputs or sorted(str(p) for p in SHARED_WARC.glob("*.warc.gz"))
    if not inputs:
        raise SystemExit(f"no input: give WARC files or provide {SHARED_WARC}")

    recipe = load_recipe("fineweb-snapshot")
    indexes = [i for i, spec in enumerate(recipe.stages) if spec.stage in STAGES]
    stages = []
    for index in indexes:
        stage = recipe.build(index)
        if stage.name == "extract":
            stage = type(stage)(stage.params.model_copy(update={"backend": args.backend}))
        stage.ready()
        stages.append(stage)

    rows = {"read": {"docs": 0, "mb": sum(Path(p).stat().st_size for p in inputs) / 1e6, "seconds": 0.0}}
    for repeat in range(args.repeat):
        started = time.perf_counter()
        tables = [read_input(recipe.source, "rates", path).table for path in inputs]
        rows["read"]["seconds"] += time.perf_counter() - started
        rows["read"]["docs"] = sum(t.num_rows for t in tables)
        for stage in stages:
            row = rows.setdefault(stage.name, {"docs": 0, "mb": 0.0, "seconds": 0.0})
            row["docs"] = sum(t.num_rows for t in tables)
            row["mb"] = sum(megabytes(t) for t in tables)
            started = time.perf_counter()
            tables = run_stage(stage, tables)
            row["seconds"] += time.perf_counter() - started
    print(f"{len(inputs)} file(s), extract backend {args.backend}, {args.repeat} warm pass(es), one core")
    pages = max(rows["read"]["docs"], 1)
    print(f"{'stage':<12}{'docs in':>9}{'MB in':>9}{'s/pass':>9}{'docs/s':>10}{'MB/s':>8}{'ms/page':>9}")
    for name, row in rows.items():
        seconds = row["seconds"] / args.repeat
        row.update(seconds=round(seconds, 4), docs_per_s=round(row["docs"] / seconds, 1), mb_per_s=round(row["mb"] / seconds, 2),
                   ms_per_input_page=round(1000 * seconds / pages, 3))  # fmt: skip
        print(f"{name:<12}{row['docs']:>9,}{row['mb']:>9.2f}{seconds:>9.3f}{row['docs_per_s']:>10,.0f}{row['mb_per_s']:>8.1f}"
              f"{row['ms_per_input_page']:>9.2f}")  # fmt: skip
    total = sum(row["ms_per_input_page"] for row in rows.values())
    print(f"{'all':<12}{'':>36}{1000 / total:>10,.0f}{'':>8}{total:>9.2f}   (input pages per second per core)")
    if args.json:
        Path(args.json).write_text(json.dumps({"inputs": inputs, "backend": args.backend, "stages": rows}, indent=1))


if __name__ == "__main__":
    main()
