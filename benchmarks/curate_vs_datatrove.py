"""`curate run fineweb-snapshot` (read -> trafilatura -> lid.176 en >= 0.65) vs datatrove's same steps, same files.

    python benchmarks/curate_vs_datatrove.py [--pages 2000] [--files 4] [--workers 2] [--anchor-python .venv-anchor/bin/python]

Input: shared/bench/make_bench_warc.py over ../shared/data/langid/sentences when present, else our sample snapshot.
Baseline: datatrove 0.10 LocalPipelineExecutor (WarcReader -> Trafilatura(favour_precision) -> LanguageFilter),
run as a subprocess under the anchor venv (datatrove pins another trafilatura). Both use `workers` processes.
Prints wall seconds, HTML docs/s and the ratio ours/datatrove (higher is better for ours).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def make_input(folder: Path, pages: int, files: int, anchor_python: str) -> tuple[str, str]:
    sentences = SHARED / "data" / "langid" / "sentences"
    maker = SHARED / "bench" / "make_bench_warc.py"
    if sentences.is_dir() and maker.is_file():
        subprocess.run([anchor_python, str(maker), str(sentences), str(folder / "bench.warc.gz"), "--pages", str(pages),
                        "--seed", "1", "--files", str(files)], check=True, capture_output=True)  # fmt: skip
        return f"{folder}/bench-*.warc.gz", "make_bench_warc.py (real sentences, 32 languages)"
    from curation.sources import sample

    sample.generate(folder, pages=pages, files=files, seed=1)
    return f"{folder}/sample-*.warc.gz", "curate sample"


def run_ours(pattern: str, output: Path, workers: int) -> dict:
    import glob

    import ray

    from curation import runner, stats
    from curation.recipe import load_recipe

    started = time.perf_counter()
    ray.init(num_cpus=workers, include_dashboard=False, object_store_memory=200 * 1024**2, logging_level="WARNING")
    ray_start = time.perf_counter() - started
    runner.run(load_recipe("fineweb-snapshot"), sorted(glob.glob(pattern)), str(output), "bench")
    wall = time.perf_counter() - started
    ray.shutdown()
    frame = stats.load(str(output))
    return {
        "wall": wall,
        "ray_start": ray_start,
        "docs_in": int(frame[frame.stage == "00_read"].docs_out.sum()),
        "docs_out": int(frame[frame.stage == "02_langid"].docs_out.sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--anchor-python", default=str(ROOT / ".venv-anchor" / "bin" / "python"))
    args = parser.parse_args()
    from filters.langid import default_lid_model

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "in").mkdir()
        pattern, origin = make_input(folder / "in", args.pages, args.files, args.anchor_python)
        ours = run_ours(pattern, folder / "ours", args.workers)
        anchor = subprocess.run(
            [args.anchor_python, str(ROOT / "benchmarks" / "datatrove_prefix.py"), pattern, str(folder / "datatrove"),
             "--workers", str(args.workers), "--lid-model", str(default_lid_model())],
            check=True, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        theirs = json.loads(anchor.stdout.strip().splitlines()[-1])
    print(f"input: {args.pages} pages in {args.files} WARC files from {origin}; {args.workers} workers; machine cores: "
          f"{__import__('os').cpu_count()}")  # fmt: skip
    print(f"{'system':<34}{'HTML docs':>10}{'kept':>7}{'wall s':>9}{'docs/s':>9}")
    for name, result in [("datatrove 0.10 (baseline)", theirs), ("curate (Ray, incl. Ray start)", ours)]:
        print(f"{name:<34}{result['docs_in']:>10}{result['docs_out']:>7}{result['wall']:>9.1f}"
              f"{result['docs_in'] / result['wall']:>9.1f}")  # fmt: skip
    steady = ours["wall"] - ours["ray_start"]
    print(f"{'curate (after Ray start)':<34}{ours['docs_in']:>10}{ours['docs_out']:>7}{steady:>9.1f}{ours['docs_in'] / steady:>9.1f}")
    print(f"ratio ours/datatrove docs/s: {theirs['wall'] / ours['wall']:.2f}x (incl. Ray start), "
          f"{theirs['wall'] / steady:.2f}x (after Ray start)")


if __name__ == "__main__":
    sys.exit(main())
