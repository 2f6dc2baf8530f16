"""Where a `curate run`'s memory goes: the RSS of each process of its tree at the peak of their sum, by role (the
driver, Ray's GCS, raylet, dashboard head, dashboard agent, runtime-env agent, monitors, each worker), and the RSS that
loading langid.py's model adds to a process. The figures behind docs/benchmarks.md's memory breakdown.

    python benchmarks/memory_by_process.py [--input 'bench/bench-*.warc.gz'] [--pages 800] [--files 4] [--workers 2]
        [--backend resiliparse]

Input: `--input` (e.g. the bench WARC files that `benchmarks/curate_vs_datatrove.py --keep WORK` leaves in WORK/in-8000),
else the built-in sample snapshot of `--pages` pages in `--files` files. The recipe is curate_vs_datatrove's: the
stages FineWeb has, with `--backend`'s extractor. The run is a subprocess, sampled 5 times a second with psutil.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from curate_vs_datatrove import PeakByRole, write_recipe

LANGID_PY = """
import psutil
before = psutil.Process().memory_info().rss
from py3langid.langid import MODEL_FILE, LanguageIdentifier
imported = psutil.Process().memory_info().rss
identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)  # kept: freed, it would not count
print(imported - before, psutil.Process().memory_info().rss - imported)
"""


def measure(args, work: Path) -> dict[str, int]:
    """Run `curate run` on the input (made in `work` when not given); the RSS by role at the peak."""
    pattern = args.input
    if pattern is None:
        from curation.sources import sample

        sample.generate(work / "input", pages=args.pages, files=args.files, seed=0)
        pattern = f"{work / 'input'}/*.warc.gz"
    recipe = write_recipe(work / f"fineweb-{args.backend}.yaml", args.backend)
    command = [sys.executable, "-m", "curation", "run", str(recipe), "--input", pattern, "--output", str(work / "run"),
               "--num-cpus", str(args.workers)]  # fmt: skip
    with open(work / "run.log", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        sampler = PeakByRole(process.pid)
        code = process.wait()
    at_peak = sampler.stop()
    if code:
        raise SystemExit(f"{' '.join(command)} exited {code}:\n{(work / 'run.log').read_text()[-3000:]}")
    return at_peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", default=None, help="WARC files (a glob); default: a sample snapshot made here")
    parser.add_argument("--pages", type=int, default=800)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", default="resiliparse", choices=["resiliparse", "trafilatura"])
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="memory-by-process-"))
    try:
        at_peak = measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    mib = 2**20
    ray_own = {name: rss for name, rss in at_peak.items() if not name.startswith(("worker", "driver"))}
    source = args.input or f"the sample snapshot ({args.pages} pages, {args.files} files)"
    print(f"curate run ({args.backend}, {args.workers} workers) on {source}: peak RSS of the process tree "
          f"{sum(at_peak.values()) / mib:,.0f} MiB; by process at that peak:")  # fmt: skip
    for name, rss in sorted(at_peak.items(), key=lambda item: -item[1]):
        print(f"  {name:<30}{rss / mib:>8,.0f} MiB")
    print(f"  {'Ray own processes, together':<30}{sum(ray_own.values()) / mib:>8,.0f} MiB")
    imported, model = (int(n) for n in subprocess.run([sys.executable, "-c", LANGID_PY], capture_output=True, text=True,
                                                      check=True).stdout.split())  # fmt: skip
    print(f"langid.py in a fresh process: import {imported / mib:.0f} MiB, its model (LanguageIdentifier.from_model_file) "
          f"{model / mib:.0f} MiB more: what each worker pays where langid consults it (consult_below > 0)")  # fmt: skip


if __name__ == "__main__":
    main()
