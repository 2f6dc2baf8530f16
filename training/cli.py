"""`train`: only its interface exists yet; the FSDP2 trainer lands with the trainer issue."""

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="train",
        description="Train a Llama-style model with FSDP2 + BF16 on curated token shards mixed as a mixture YAML "
        "says. Not implemented yet: this release ships curation only.",
    )
    parser.add_argument("--mixture", help="mixture YAML, e.g. mixtures/web70_code20.yaml")
    parser.add_argument("--config", default="tiny", help="model size: tiny|small|1b or a YAML path")
    parser.add_argument("--steps", type=int, help="optimizer steps to run")
    parser.add_argument("--out", help="run folder for checkpoints and metrics")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    parser.parse_args(argv)
    parser.print_help()
    print("\ntrain: the trainer is not implemented yet; see the open trainer issue.", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
