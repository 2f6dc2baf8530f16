"""`train plan`'s memory estimate beside the peak tensor memory measured on CPU layouts, under real torchrun (gloo).

Each row launches torchrun with the row's ranks; every rank builds the tiny model (training.model.Transformer),
applies training.parallelize, runs a few AdamW steps in fp32 and measures its peak with torch's own tracker
(torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker: every tensor it sees allocated, by category). The planner
(training.memory_plan.estimate) is asked for the same model, layout, shape and dtype. In fp32 the 16 bytes per parameter
stay 16: the fp32 sharded parameter is the master copy (4), the fp32 gradient (4), Adam's m and v (8); what doubles
from bf16 is the gathered copies and the activations (4 bytes a value), which the planner scales by param_bytes 4.

    python benchmarks/memory_plan_vs_measured.py [--model tiny-moe]   # from the repository root; one row per run

--model tiny-moe: the mixture of experts (8 experts of 224, top 2 + 1 shared) on one rank, FSDP 2 and EP 2, which
checks the planner's MoE activations (per token and chosen expert) and its gathered copy under EP.
"""

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import torch

from training.memory_plan import Layout, estimate
from training.model import MODEL_CONFIGS, Transformer

ROOT = Path(__file__).resolve().parents[1]
# no PP row: the tracker's backward hooks fail under the pipeline's autograd.grad of a stage's inputs (torch 2.13)
LAYOUTS = [("1 rank", Layout(1, 1, 1, 1)), ("FSDP 2", Layout(1, 2, 1, 1)), ("TP 2", Layout(1, 1, 2, 1)),
           ("FSDP2xTP2", Layout(1, 2, 2, 1))]  # fmt: skip
MOE_LAYOUTS = [("1 rank", Layout(1, 1, 1, 1)), ("FSDP 2", Layout(1, 2, 1, 1)), ("EP 2", Layout(1, 2, 1, 1, 2))]
SHAPES = [(2, 128), (8, 256)]  # (micro batch, seq_len): tiny's default, and one where activations dominate
STEPS = 3


def model_config(seq_len: int, model: str = "tiny"):
    return replace(MODEL_CONFIGS[model], max_seq_len=max(MODEL_CONFIGS[model].max_seq_len, seq_len))


def build(config, layout: Layout, checkpointing: bool):
    """The model on the trainer's mesh, parallelized as the trainer does it, and the meshes."""
    from training.config import Parallelism
    from training.mesh import build as build_mesh
    from training.parallelize import parallelize

    meshes = build_mesh(Parallelism(**vars(layout)).resolve(layout.dp_replicate * layout.dp_shard * layout.tp * layout.pp), "cpu")
    return parallelize(Transformer(config), meshes.tp, meshes.fsdp, torch.float32, checkpointing, False, experts=meshes.experts), meshes


def measure(layout: Layout, checkpointing: bool, micro_batch: int, seq_len: int, model_name: str) -> int:
    """Peak tensor bytes on this rank over STEPS optimizer steps."""
    import torch.nn.functional as F
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    from training.optimizer import build as build_optimizer
    from training.trainer import optimizer_step

    torch.manual_seed(0)
    config = model_config(seq_len, model_name)

    model, meshes = build(config, layout, checkpointing)
    optimizer = build_optimizer(model, "adamw", 1e-3, 0.01, (0.9, 0.999))  # the trainer's groups: one mesh per foreach
    tokens = torch.randint(0, config.vocab_size, (micro_batch, seq_len + 1))
    tracker = FSDPMemTracker(model, optimizer)
    tracker.track_inputs((tokens,))
    with tracker:
        for _ in range(STEPS):
            tracker.reset_mod_stats()  # the tracker's per-module stats are per iteration; the peak is kept
            logits = model(tokens[:, :-1]).float()  # the trainer's loss: fp32 logits, per-token cross-entropy
            loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="none").mean()
            loss.backward()
            optimizer_step(model, optimizer, 1.0, True, meshes)  # clipped per mesh, stepped, gradients dropped
    return max(snapshot["Total"] for snapshot in tracker.get_tracker_snapshot("peak").values())


def rank_main(args) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    layout = Layout(*args.layout)
    peak = torch.tensor([measure(layout, args.ac, args.micro_batch, args.seq_len, args.model)], dtype=torch.float64)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps({"peak": peak.item()}))
    dist.destroy_process_group()


def run(layout: Layout, checkpointing: bool, micro_batch: int, seq_len: int, model: str) -> float:
    ranks = layout.dp_replicate * layout.dp_shard * layout.tp * layout.pp
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", __file__, "--rank",
               "--layout", *map(str, vars(layout).values()), "--micro-batch", str(micro_batch), "--seq-len", str(seq_len),
               "--model", model]  # fmt: skip
    done = subprocess.run(command + (["--ac"] if checkpointing else []), capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"memory_plan_vs_measured: torchrun failed for {layout.describe()}:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])["peak"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--layout", type=int, nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--model", default="tiny", choices=["tiny", "tiny-moe"])
    parser.add_argument("--ac", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--micro-batch", type=int, dest="micro_batch", help=argparse.SUPPRESS)
    parser.add_argument("--seq-len", type=int, dest="seq_len", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        return rank_main(args)
    print(f"{args.model} model, fp32 on CPU (gloo), AdamW, {STEPS} steps; MiB per rank (the fullest rank); torch {torch.__version__}")
    print(f"{'layout':<10}{'AC':<5}{'micro batch x seq':>18}{'planned':>10}{'measured':>10}{'planned/measured':>18}")
    for name, layout in MOE_LAYOUTS if args.model == "tiny-moe" else LAYOUTS:
        for micro_batch, seq_len in SHAPES:
            for checkpointing in (False, True):
                planned = estimate(model_config(seq_len, args.model), layout, seq_len, micro_batch, param_bytes=4).total(checkpointing)
                measured = run(layout, checkpointing, micro_batch, seq_len, args.model)
                print(f"{name:<10}{'on' if checkpointing else 'off':<5}{f'{micro_batch} x {seq_len}':>18}{planned / 2**20:>10.1f}"
                      f"{measured / 2**20:>10.1f}{planned / measured:>18.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
