"""The trainer's GPU path on one lent GPU (an H200): the 1B config under FSDP2 in bf16, per attention kernel, with and
without torch.compile, then FP8 (torchao float8, rowwise and tensorwise, compiled) against the compiled bf16 run, in
one table; the rows of layouts that need several GPUs (FSDP 2 vs TP 2, PP 2) say so on one GPU. Run by
benchmarks/gpu_check.sh; `--dry-run` prints the plan and checks the imports on any machine.

Synthetic random tokens (the data path is not what is measured), the same seed for every run, so the first steps'
losses must agree across kernels within bf16 tolerance, and FP8's with bf16's within FP8_LOSS_TOLERANCE. Per run:
tokens/s, TFLOP/s and MFU against the device's dense bf16 peak (training/metrics.py: H200 989 TFLOP/s; FP8 runs are
measured against the same bf16 peak, so their MFU shows the gain), and peak memory (reset between runs). Imports only
torch and the model, attention, fp8 and parallelize modules: no pydantic, no Ray (the lent machine has neither).
"""

import argparse
import gc
import importlib.util
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh

from training import fp8
from training.attention import _flash_attn_func, choose_attention
from training.launch import tie_to_launcher
from training.metrics import peak_flops
from training.model import MODEL_CONFIGS, Transformer, flops_per_token
from training.parallelize import parallelize

LOSS_TOLERANCE = 0.02  # bf16: the first steps' losses of two kernels agree to about 1%
FP8_LOSS_TOLERANCE = 0.03  # float8 matmuls (e4m3, 3 mantissa bits) against bf16 on the same first steps
FP8_BASELINE = ("sdpa-flash", True, "off")  # FP8 runs compiled (torchao's casts are fused only then) on this kernel
MULTI_GPU_ROWS = ("FSDP 2 vs TP 2", "PP 2")  # NCCL cannot put two ranks on one GPU


def plan(with_flash_attn: bool) -> list[tuple[str, bool, str]]:
    """(attention kernel, compiled, fp8 recipe) of each run."""
    kernels = ["sdpa-flash", "sdpa-cudnn"] + (["flash_attn"] if with_flash_attn else [])
    runs = [(kernel, compiled, "off") for kernel in kernels for compiled in (False, True)]
    return runs + [(FP8_BASELINE[0], FP8_BASELINE[1], recipe) for recipe in ("rowwise", "tensorwise")]


def run_name(kernel: str, compiled: bool, recipe: str) -> str:
    return f"fp8 {recipe} vs bf16" if recipe != "off" else kernel + (" + compile" if compiled else "")


def fresh_device() -> None:
    """Nothing of an earlier run left: FSDP2's reference cycles hold its parameters until collected (a peak would
    count them), and dynamo would reuse a block compiled under another SDPA backend (its guards do not see the
    process-wide backend flags; main turns off the caches that do not either)."""
    gc.collect()
    torch.cuda.empty_cache()
    torch._dynamo.reset()


def measure(kernel: str, compiled: bool, recipe: str, args, mesh, device) -> dict:
    fresh_device()
    resident = torch.cuda.memory_allocated(device)
    torch.manual_seed(0)
    config = MODEL_CONFIGS[args.config]
    _, attend = choose_attention(device, torch.bfloat16, kernel)
    with torch.device("meta"):
        model = Transformer(config)
    model.set_attention(attend)
    fp8.convert(model, recipe, device)
    parallelize(model, None, mesh, torch.bfloat16, activation_checkpointing=args.ac, compile_blocks=compiled)
    with torch.no_grad():
        model.init_weights(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    generator = torch.Generator(device=device).manual_seed(1)
    tokens = torch.randint(0, config.vocab_size, (args.micro_batch, args.seq_len + 1), device=device, generator=generator)
    torch.cuda.reset_peak_memory_stats(device)  # the training steps' peak, not the model's initialization
    losses = []
    began = time.perf_counter()
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            torch.cuda.synchronize()
            started = time.perf_counter()
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step < 3:
            losses.append(loss.item())
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    per_gpu = args.steps * args.micro_batch * args.seq_len / seconds
    result = {"tokens_per_s": per_gpu, "flops": per_gpu * flops_per_token(config, model.num_params(active=True), args.seq_len),
              "memory_gib": torch.cuda.max_memory_allocated(device) / 2**30, "losses": losses,
              "first_s": started - began, "resident_gib": resident / 2**30}  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="1b")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--ac", action="store_true", help="activation checkpointing")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and check the imports, without a GPU")
    args = parser.parse_args()
    runs = plan(_flash_attn_func() is not None)
    config = MODEL_CONFIGS[args.config]
    print(f"plan: {args.config} ({Transformer.__name__}, dim {config.dim}, {config.n_layers} layers), FSDP2 bf16 params / "
          f"fp32 reduce, seq_len {args.seq_len}, micro batch {args.micro_batch}, {args.warmup} warm-up + {args.steps} timed "
          f"steps; runs: {', '.join([run_name(*run) for run in runs] + list(MULTI_GPU_ROWS))}")  # fmt: skip
    print(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}, flash-attn importable: "
          f"{_flash_attn_func() is not None}, torchao importable: {importlib.util.find_spec('torchao') is not None}")  # fmt: skip
    absent = [name for name in ("pydantic", "ray", "pandas", "curation") if name in sys.modules]
    print(f"imports: training's model, attention, parallelize, fp8 and metrics load with torch alone{'' if not absent else f'; but also {absent}'}")
    if args.dry_run:
        return
    tie_to_launcher()  # torchrun starts its rank in a session of its own: without this, killing the check leaves it on the GPU
    dist.init_process_group("nccl")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    device_name, peak = peak_flops(device)
    # each compiled run compiles its own blocks: inductor's and AOT autograd's caches do not key on the SDPA backend
    # (not yet run on a GPU with them off: docs/benchmarks.md, "Trainer on the lent GPU")
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    rank0 = dist.get_rank() == 0
    if rank0:
        print(f"{args.config} on {dist.get_world_size()} x {device_name}; peak {peak / 1e12 if peak else 'unknown'} TFLOP/s dense bf16")
        print(f"{'run':<22}{'tokens/s/GPU':>14}{'TFLOP/s':>9}{'MFU':>7}{'peak GiB':>10}{'first s':>9}  first losses", flush=True)
    results, agreed = {}, True
    for run in runs:  # each row printed as it is measured, so a run cut short by the machine's limit keeps its rows
        results[run] = r = attempt(run, args, mesh, device)
        if rank0:
            print(row(run, r, peak), flush=True)
    if rank0:
        for name in MULTI_GPU_ROWS:
            print(f"{name:<22}skipped: " + ("needs 2 GPUs (NCCL cannot put two ranks on one GPU)" if torch.cuda.device_count() < 2
                                            else "this check runs one rank; the TP and PP layouts are not wired into it yet"))  # fmt: skip
        bf16 = [r for run, r in results.items() if run[2] == "off" and "skipped" not in r]
        if bf16:
            agreed &= compare("kernels", bf16[0]["losses"], bf16, LOSS_TOLERANCE)
        measured_fp8 = [r for run, r in results.items() if run[2] != "off" and "skipped" not in r]
        if measured_fp8 and "skipped" in results[FP8_BASELINE]:
            print(f"fp8 not compared: its baseline {run_name(*FP8_BASELINE)} was not measured")
        elif measured_fp8:
            agreed &= compare("fp8 and bf16", results[FP8_BASELINE]["losses"], measured_fp8, FP8_LOSS_TOLERANCE)
    dist.destroy_process_group()
    failed = [run_name(*run) for run, r in results.items() if r.get("skipped", "").startswith("failed")]
    problems = ([f"failed: {', '.join(failed)}"] if failed else []) + ([] if agreed else ["first losses disagree"])
    if problems:
        sys.exit("gpu_check: " + "; ".join(problems))


def attempt(run: tuple[str, bool, str], args, mesh, device) -> dict:
    """A run's measurements; for an FP8 run this device or install cannot do, or any run that fails (torchao built
    for another torch, a kernel this build lacks), {"skipped": why} in one line and the traceback on stderr, so the
    other rows still print."""
    recipe = run[2]
    try:
        fp8.check(recipe, device)
    except ValueError as error:
        return {"skipped": str(error)}
    try:
        return measure(*run, args, mesh, device)
    except Exception as error:  # noqa: BLE001 - one failing kernel must not lose the rows measured before or after it
        traceback.print_exc(limit=-8)  # the innermost frames: the output that comes back keeps its end, the table
        return {"skipped": f"failed: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]}


def row(run: tuple[str, bool, str], r: dict, peak: float | None) -> str:
    if "skipped" in r:
        return f"{run_name(*run):<22}skipped: {r['skipped']}"
    mfu = f"{r['flops'] / peak:.1%}" if peak else "?"
    left = f"  ({r['resident_gib']:.1f} GiB resident from earlier runs)" if r["resident_gib"] > 0.1 else ""
    return (f"{run_name(*run):<22}{r['tokens_per_s']:>14,.0f}{r['flops'] / 1e12:>9.1f}{mfu:>7}{r['memory_gib']:>10.1f}"
            f"{r['first_s']:>9.1f}  " + " ".join(f"{loss:.4f}" for loss in r["losses"]) + left)  # fmt: skip


def compare(what: str, reference: list[float], results: list[dict], tolerance: float) -> bool:
    worst = max(abs(a - b) / a for r in results for a, b in zip(reference, r["losses"]))
    print(f"first losses agree across {what} within {worst:.2%} (tolerance {tolerance:.0%}): {'OK' if worst <= tolerance else 'MISMATCH'}")
    return worst <= tolerance


if __name__ == "__main__":
    main()
