"""How `train ladder` should schedule its smallest rungs on a CPU machine: two 1-rank runs side by side (one core
each) against the same two runs one after the other as 2-rank FSDP runs (the baseline: what `train` does alone).

    python benchmarks/ladder_side_by_side.py [--mixture mixtures/ladder_code.yaml] [--width 48] [--steps 300]

Both train the same rung (the ladder's shape rule at --width, its sequence length and batch) for the same steps on
the same mixture; prints the wall time of each schedule, the ratio, and the final validation losses (the same
training, so they should agree to the noise of a different reduction order).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.ladder import LadderSpec, shape  # noqa: E402


def config(folder: Path, spec: LadderSpec, width: int, steps: int, ranks: int) -> Path:
    path = folder / f"w{width}-r{ranks}.yaml"
    path.write_text(yaml.safe_dump({
        "model": "tiny", "model_overrides": shape(spec, width), "seq_len": spec.seq_len, "global_batch": spec.global_batch,
        "micro_batch": spec.global_batch // ranks, "steps": steps, "lr": spec.lr, "warmup": steps // 20,
        "eval_every": steps, "eval_sequences": 64, "checkpoint_every": steps, "log_every": max(1, steps // 10)}))  # fmt: skip
    return path


def start(mixture: str, settings: Path, out: Path, ranks: int, threads: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "training", "--mixture", mixture, "--config", str(settings), "--out", str(out),
               "--ranks", str(ranks)]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=os.environ | {"OMP_NUM_THREADS": str(threads)})  # fmt: skip


def final_loss(out: Path) -> float:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [record["val_loss"] for record in records if record.get("val_loss") is not None][-1]


def finish(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        _, error = process.communicate()
        if process.returncode:
            raise SystemExit(f"a run failed: {error[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixture", default=str(ROOT / "mixtures" / "ladder_code.yaml"))
    parser.add_argument("--width", type=int, default=48)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    spec, cores = LadderSpec(mixture=args.mixture), os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        started = time.perf_counter()
        finish([start(args.mixture, config(folder, spec, args.width, args.steps, 1), folder / f"side-{k}", 1, max(1, cores // 2))
                for k in range(2)])  # fmt: skip
        side = time.perf_counter() - started
        started = time.perf_counter()
        for k in range(2):
            finish([start(args.mixture, config(folder, spec, args.width, args.steps, 2), folder / f"fsdp-{k}", 2, max(1, cores // 2))])
        fsdp = time.perf_counter() - started
        losses = [final_loss(folder / name) for name in ("side-0", "side-1", "fsdp-0", "fsdp-1")]
    print(f"two rungs of width {args.width}, {args.steps} steps each, on {cores} cores")
    print(f"| schedule | wall s | final validation losses |\n|---|---|---|")
    print(f"| two 1-rank runs side by side | {side:.1f} | {losses[0]:.4f}, {losses[1]:.4f} |")
    print(f"| baseline: one 2-rank FSDP run after the other | {fsdp:.1f} | {losses[2]:.4f}, {losses[3]:.4f} |")
    print(f"side by side is {fsdp / side:.2f}x the baseline's speed")


if __name__ == "__main__":
    main()
