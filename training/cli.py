"""`train`: validate the mixture and config, then run under torchrun (launching it when not already under it)."""

import argparse
import os
import sys
from pathlib import Path

import torch


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="train",
        description="Train a Llama-style decoder with FSDP2 (+ BF16 and FlashAttention on GPUs) on curated token shards, "
        "mixed as a mixture YAML says. Run as is, it launches itself under torchrun on this machine (CUDA GPUs, else "
        "2 CPU ranks with gloo); on many nodes launch it yourself: torchrun --nnodes N ... -m training --mixture ...",
    )
    parser.add_argument("--mixture", required=True, help="mixture YAML, e.g. mixtures/web70_code20.yaml")
    parser.add_argument("--config", default="tiny", help="preset tiny|small|1b, or a YAML file of training settings")
    parser.add_argument("--steps", type=int, help="optimizer steps (overrides the config)")
    parser.add_argument("--out", default="runs/train", help="run folder: metrics.jsonl, checkpoints/, lineage.jsonl")
    parser.add_argument("--resume", action="store_true", help="continue from the latest complete checkpoint in --out")
    parser.add_argument("--ranks", type=int, help="processes to launch on this machine (default: GPUs, else 2)")
    parser.add_argument("--seq-len", type=int, dest="seq_len")
    parser.add_argument("--global-batch", type=int, dest="global_batch", help="sequences per step over all ranks")
    parser.add_argument("--micro-batch", type=int, dest="micro_batch", help="sequences per rank per forward")
    parser.add_argument("--lr", type=float)
    parser.add_argument("--dtype", choices=["auto", "bf16", "fp32"])
    parser.add_argument("--checkpoint-every", type=int, dest="checkpoint_every")
    parser.add_argument("--lineage-every", type=int, dest="lineage_every", help="write every N-th batch's document ids")
    parser.add_argument("--seed", type=int)
    return parser


OVERRIDES = ("steps", "seq_len", "global_batch", "micro_batch", "lr", "dtype", "checkpoint_every", "lineage_every", "seed")


def main(argv: list[str] | None = None) -> int:
    from training import checkpoint
    from training.config import load_config
    from training.mixture import MixtureError, load_mixture

    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    try:
        mixture = load_mixture(args.mixture)
        for name in mixture.source_names():
            mixture.shard_files(name)
        if not Path(mixture.tokenizer_path()).is_file():
            raise MixtureError(f"tokenizer not found: {mixture.tokenizer_path()}")
        config = load_config(args.config, **{k: getattr(args, k) for k in OVERRIDES})
        previous = checkpoint.latest(Path(args.out) / "checkpoints")
        if previous and not args.resume:
            raise ValueError(f"{args.out} already holds a run (latest checkpoint {previous.name}): pass --resume to "
                             "continue it, or choose another --out")  # fmt: skip
    except (MixtureError, ValueError) as error:
        print(f"train: {error}", file=sys.stderr)
        return 2
    if "LOCAL_RANK" not in os.environ:
        ranks = args.ranks or (torch.cuda.device_count() or 2)
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", "-m", "training"]
        os.execv(sys.executable, launch + argv)
    from training.trainer import train

    train(config, mixture, Path(args.out), args.resume)
    return 0


if __name__ == "__main__":
    sys.exit(main())
