"""What a one-rank `train` run costs before and after its steps: in `train`'s own process (the default for one rank
without --max-restarts) against the baseline, the same run under torchrun's agent with its rank in a second
interpreter (what `--max-restarts 1` still takes). A ladder or a decision runs dozens of small runs, so this fixed cost
is paid dozens of times.

    python benchmarks/one_rank_start.py [--runs 5] [--steps 2] [--work /tmp/one-rank-start]

Data: the built-in sample snapshot (400 pages), curated and tokenized once into --work (train_throughput's shards). Each run trains --steps
steps of the tests' small model (seq 64, batch 8) from scratch into a fresh folder, the two ways taking turns; printed:
each way's median wall seconds over --runs, and the ratio of the baseline's to the in-process run's.
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from train_throughput import make_shards

SETTINGS = "seq_len: 64\nglobal_batch: 8\nmicro_batch: 2\nwarmup: 2\ndtype: fp32\nlog_every: 1\n"


def prepare(work: Path) -> Path:
    """The mixture over the sample's token shards, made once per --work folder."""
    mixture = work / "mix.yaml"
    if not mixture.is_file():
        make_shards(work)
    (work / "settings.yaml").write_text(SETTINGS)
    return mixture


def timed(work: Path, mixture: Path, out: str, steps: int, extra: list[str]) -> float:
    shutil.rmtree(work / out, ignore_errors=True)
    command = [sys.executable, "-m", "training", "--mixture", str(mixture), "--config", "settings.yaml", "--steps",
               str(steps), "--ranks", "1", "--out", out, *extra]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=work, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/one-rank-start"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    mixture = prepare(args.work)
    ways = {"in train's process": [], "baseline: torchrun agent + rank (--max-restarts 1)": []}
    for _ in range(args.runs):
        ways["in train's process"].append(timed(args.work, mixture, "here", args.steps, []))
        ways["baseline: torchrun agent + rank (--max-restarts 1)"].append(timed(args.work, mixture, "agent", args.steps, ["--max-restarts", "1"]))
    medians = {way: statistics.median(seconds) for way, seconds in ways.items()}
    for way, seconds in ways.items():
        print(f"{way}: median {medians[way]:.2f} s over {len(seconds)} runs of {args.steps} steps ({', '.join(f'{s:.2f}' for s in seconds)})")
    here, baseline = medians.values()
    print(f"baseline / in-process: {baseline / here:.2f}x ({baseline - here:.2f} s less per run)")


if __name__ == "__main__":
    main()
