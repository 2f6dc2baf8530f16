"""Where a `curate run`'s CPU goes over time: the cores its process tree keeps busy, half-second by half-second, and
the machine's, against the run's stage seconds.

    python benchmarks/cpu_timeline.py [--input 'WORK/in-8000/bench-*.warc.gz'] [--pages 2000] [--files 4]
        [--workers 2] [--backend resiliparse] [--interval 0.05]

Input: `--input` (e.g. the bench WARC files `benchmarks/curate_vs_datatrove.py --keep WORK` leaves in WORK/in-8000),
else the built-in sample snapshot of `--pages` pages in `--files` files, made first (not timed). The recipe is
curate_vs_datatrove's: the stages FineWeb has, with `--backend`'s extractor. `curate run` is a subprocess, Ray start
and stop included. Every `--interval` seconds the sampler reads the CPU seconds of each process of the run's tree
(psutil; a process that ended keeps its last reading) and the machine's busy CPU seconds (all cores, as
`curate_vs_datatrove.busy_cpu_seconds`). Printed: the busy cores of the run's tree and of the machine per half-second;
the run's wall, the tree's CPU seconds and the stage seconds summed over tasks (stats.json), the floor (stage seconds
/ workers) and the tree's CPU / cores against it (the least wall that CPU allows when the run has the machine's cores
to itself); core-seconds the run left unused (cores x wall - the tree's CPU) in its first and last 2 seconds and in
all. The machine's columns mean something only when nothing else runs: the load average before and after is printed.
Baseline: the floor, the wall with no start-up, no idle worker and nothing between tasks.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from curate_vs_datatrove import busy_cpu_seconds, write_recipe


class CpuSampler:
    """The CPU seconds of a process tree, and the machine's busy seconds, every `interval` seconds."""

    def __init__(self, pid: int, interval: float):
        self.root, self.interval = psutil.Process(pid), interval
        self.known: dict[int, psutil.Process] = {pid: self.root}
        self.last: dict[int, float] = {}
        self.samples: list[tuple[float, float, float]] = []  # (seconds since start, tree CPU s, machine busy CPU s)
        self.started, self.machine_start = time.perf_counter(), busy_cpu_seconds()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def sample(self) -> None:
        try:
            for child in self.root.children(recursive=True):
                self.known.setdefault(child.pid, child)
        except psutil.Error:
            pass
        for pid, process in self.known.items():
            try:
                times = process.cpu_times()
                self.last[pid] = times.user + times.system  # not children's: a reaped child's own reading is kept
            except psutil.Error:
                pass  # ended: its last reading stays
        now = time.perf_counter() - self.started
        self.samples.append((now, sum(self.last.values()), busy_cpu_seconds() - self.machine_start))

    def _loop(self) -> None:
        while not self.done.wait(self.interval):
            self.sample()

    def stop(self) -> list[tuple[float, float, float]]:
        self.done.set()
        self.thread.join()
        return self.samples


def per_half_second(samples: list[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """(start of the half-second, tree cores, machine cores) from the cumulative samples."""
    rows, previous, edge = [], (0.0, 0.0, 0.0), 0.5
    for sample in samples:
        if sample[0] >= edge:
            span = sample[0] - previous[0]
            rows.append((previous[0], (sample[1] - previous[1]) / span, (sample[2] - previous[2]) / span))
            previous, edge = sample, edge + 0.5
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", default=None, help="WARC files (a glob); default: a sample snapshot made here")
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", default="resiliparse", choices=["resiliparse", "trafilatura"])
    parser.add_argument("--interval", type=float, default=0.05)
    args = parser.parse_args()
    cores = psutil.cpu_count()
    work = Path(tempfile.mkdtemp(prefix="cpu-timeline-"))
    try:
        pattern = args.input
        if pattern is None:
            from curation.sources import sample

            sample.generate(work / "input", pages=args.pages, files=args.files, seed=0)
            pattern = f"{work / 'input'}/*.warc.gz"
        recipe = write_recipe(work / f"fineweb-{args.backend}.yaml", args.backend)
        command = [sys.executable, "-m", "curation", "run", str(recipe), "--input", pattern, "--output",
                   str(work / "run"), "--num-cpus", str(args.workers)]  # fmt: skip
        load_before = os.getloadavg()
        with open(work / "run.log", "w") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            sampler = CpuSampler(process.pid, args.interval)
            code = process.wait()
        wall = time.perf_counter() - sampler.started
        sampler.sample()
        samples = sampler.stop()
        load_after = os.getloadavg()
        if code:
            raise SystemExit(f"{' '.join(command)} exited {code}:\n{(work / 'run.log').read_text()[-3000:]}")
        stages = json.loads((work / "run" / "stats.json").read_text())["stages"]
        stage_seconds = sum(shard["seconds"] for stage in stages for shard in stage["shards"])
        stage_seconds += sum(step["seconds"] for stage in stages for step in stage.get("pass", {}).values())
        pages = sum(shard["docs_out"] for shard in stages[0]["shards"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    source = args.input or f"the sample snapshot ({args.pages} pages, {args.files} files)"
    print(f"curate run ({args.backend}, {args.workers} workers) on {source}, {pages:,} pages; {cores} cores; "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")  # fmt: skip
    print(f"{'from s':>7}{'run cores':>10}{'machine cores':>14}")
    rows = per_half_second(samples)
    for start, tree, machine in rows:
        print(f"{start:>7.1f}{tree:>10.2f}{machine:>14.2f}")
    tree_cpu, machine_cpu = samples[-1][1], samples[-1][2]
    floor = stage_seconds / args.workers
    unused = lambda rows: sum((cores - tree) * 0.5 for _, tree, _ in rows)  # noqa: E731
    print(f"wall {wall:.2f} s; the run's CPU {tree_cpu:.1f} s (machine's {machine_cpu:.1f} s); stage seconds "
          f"{stage_seconds:.1f} s, {tree_cpu - stage_seconds:.1f} s of the run's CPU beyond them")  # fmt: skip
    print(f"floor {floor:.2f} s; wall / floor {wall / floor:.2f}x; the run's CPU / {cores} cores {tree_cpu / cores:.2f} s "
          f"= {tree_cpu / cores / floor:.2f}x the floor")  # fmt: skip
    print(f"core-seconds the run left unused: {cores * wall - tree_cpu:.1f} in all, {unused(rows[:4]):.1f} in its first "
          f"2 s, {unused(rows[-4:]):.1f} in its last 2 s")  # fmt: skip


if __name__ == "__main__":
    main()
