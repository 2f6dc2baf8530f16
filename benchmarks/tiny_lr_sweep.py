"""The tiny preset's peak learning rate: validation loss after a few hundred steps of `train` at several peak lrs
(min_lr a tenth of each), on several seeds, so the preset's default is a measured choice.

    python benchmarks/tiny_lr_sweep.py [--mixture mixtures/web70_code20.yaml] [--lrs 3e-3,1e-3,3e-4] [--seeds 0,1]
        [--steps 300] [--out /tmp/tiny-lr]

Needs the mixture's token shards (the README's first command writes them). Each run is a real `train` (2 CPU ranks
here) with `eval_every` 100 on 64 held-out sequences per source. Prints, per lr and seed, the validation loss at each
evaluation, the largest gradient norm after warm-up and how many steps had a norm over 5 (spikes); baseline: the
first lr given (the preset's earlier default, 3e-3).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mixture", default="mixtures/web70_code20.yaml")
    parser.add_argument("--lrs", default="3e-3,1e-3,3e-4")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", default="/tmp/tiny-lr")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("| lr | seed | validation loss by step | max grad norm | steps with norm > 5 |\n|---|---|---|---|---|")
    for lr in args.lrs.split(","):
        for seed in args.seeds.split(","):
            run = out / f"lr{lr}-seed{seed}"
            config = out / f"lr{lr}-seed{seed}.yaml"
            config.write_text(f"model: tiny\nlr: {lr}\nmin_lr: {float(lr) / 10}\nseed: {seed}\neval_every: 100\n"
                              "eval_sequences: 64\ncheckpoint_every: 100000\n")  # fmt: skip
            command = [sys.executable, "-m", "training", "--mixture", args.mixture, "--config", str(config),
                       "--steps", str(args.steps), "--out", str(run)]  # fmt: skip
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"train failed for lr {lr} seed {seed}: {done.stderr.strip().splitlines()[-1:]}")
            rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            losses = ", ".join(f"{r['step']}: {r['val_loss']:.3f}" for r in rows if r.get("val_loss") is not None)
            norms = [r["grad_norm"] for r in rows if r["step"] > 5]
            print(f"| {lr} | {seed} | {losses} | {max(norms):.2f} | {sum(n > 5 for n in norms)} |", flush=True)


if __name__ == "__main__":
    main()
