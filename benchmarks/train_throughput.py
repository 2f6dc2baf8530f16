"""Trainer throughput on CPU: `train` (torchrun, 2 ranks, gloo, FSDP2) vs a plain single-process PyTorch loop.

    python benchmarks/train_throughput.py [--steps 30] [--seq-len 128] [--global-batch 16]

Both train the same `tiny` model on the same token shards (made here from the sample snapshot), fp32, same
global batch and sequence length. The baseline is the simplest correct loop: one process, no sharding, the
same model class and AdamW. Prints tokens/s of each (steady state: the first 5 steps are excluded) and the ratio.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]


def make_shards(folder: Path) -> Path:
    from curation.sources import sample

    sample.generate(folder / "snapshot", pages=400, files=2, seed=11)
    for args in (["run", "fineweb-snapshot", "--input", str(folder / "snapshot" / "*.warc.gz"), "--output", "curated"],
                 ["tokenize", "curated"]):  # fmt: skip
        subprocess.run([sys.executable, "-m", "curation", *args], cwd=folder, check=True, capture_output=True)
    mixture = folder / "mix.yaml"
    mixture.write_text(f"name: bench\nsources:\n  web: {{paths: ['{folder}/curated/tokens/part-*.parquet'], weight: 1}}\n")
    return mixture


def plain_loop(mixture_path: Path, steps: int, seq_len: int, global_batch: int) -> float:
    from tokenizers import Tokenizer

    from training.data import MixtureLoader
    from training.mixture import load_mixture
    from training.model import MODEL_CONFIGS, Transformer

    torch.manual_seed(0)
    mixture = load_mixture(str(mixture_path))
    tokenizer = Tokenizer.from_file(mixture.tokenizer_path())
    model = Transformer(MODEL_CONFIGS["tiny"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    loader = MixtureLoader(mixture, seq_len, global_batch, global_batch, 0, 1, 0, tokenizer.token_to_id("<|endoftext|>"))
    started = None
    for step in range(steps):
        if step == 5:
            started = time.perf_counter()
        for batch in loader.next_step():
            logits = model(batch.inputs)
            F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return (steps - 5) * global_batch * seq_len / (time.perf_counter() - started)


def fsdp_run(folder: Path, mixture: Path, steps: int, seq_len: int, global_batch: int) -> float:
    subprocess.run([sys.executable, "-m", "training", "--mixture", str(mixture), "--steps", str(steps),
                    "--seq-len", str(seq_len), "--global-batch", str(global_batch), "--micro-batch", str(global_batch // 2),
                    "--dtype", "fp32", "--checkpoint-every", str(steps * 10), "--out", "fsdp"],
                   cwd=folder, check=True, capture_output=True)  # fmt: skip
    records = [json.loads(line) for line in (folder / "fsdp" / "metrics.jsonl").read_text().splitlines()]
    steady = [r["tokens_per_s"] for r in records if r["step"] > 5]
    return len(steady) / sum(1 / t for t in steady)  # tokens/s over the steady steps (harmonic mean of per-step rates)


def run_arguments(doc: str, steps: int, seq_len: int, row_sets: list[str] | None = None) -> argparse.Namespace:
    """--steps, --seq-len and --global-batch of a training benchmark (and --rows, one of `row_sets`, the first by default)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--seq-len", type=int, default=seq_len)
    parser.add_argument("--global-batch", type=int, default=16)
    if row_sets:
        parser.add_argument("--rows", choices=row_sets, default=row_sets[0])
    return parser.parse_args()


def main() -> None:
    args = run_arguments(__doc__, steps=30, seq_len=128)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        mixture = make_shards(folder)
        torch.set_num_threads(2)
        baseline = plain_loop(mixture, args.steps, args.seq_len, args.global_batch)
        fsdp = fsdp_run(folder, mixture, args.steps, args.seq_len, args.global_batch)
    print(f"tiny model, fp32, seq_len {args.seq_len}, global batch {args.global_batch}, {args.steps} steps (first 5 excluded)")
    print(f"{'trainer':<52}{'tokens/s':>10}")
    print(f"{'plain PyTorch loop, 1 process, 2 threads (baseline)':<52}{baseline:>10.0f}")
    print(f"{'train: torchrun 2 ranks x 1 thread, gloo, FSDP2':<52}{fsdp:>10.0f}")
    print(f"ratio FSDP2 / plain: {fsdp / baseline:.2f}x")


if __name__ == "__main__":
    main()
