"""MFU of the ~1B config on a GPU machine (H100/H200), with the trainer's own model, attention and parallelize.

    torchrun --standalone --nproc_per_node=NGPU benchmarks/mfu_gpu.py [--config 1b] [--steps 20] [--seq-len 2048] [--micro-batch 4]

Synthetic random tokens (the data path is not what is measured). Prints, per configuration, tokens/s per GPU, TFLOP/s
per GPU and MFU against the peak table in training/metrics.py; the baseline line is the same model with PyTorch SDPA
instead of flash_attn, in the same process.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh

from training.attention import _sdpa, choose_attention
from training.metrics import peak_flops
from training.model import MODEL_CONFIGS, Transformer, flops_per_token
from training.parallelize import parallelize


def measure(name: str, config_name: str, attend, args, mesh, device) -> tuple[float, float]:
    torch.manual_seed(0)
    config = MODEL_CONFIGS[config_name]
    with torch.device("meta"):
        model = Transformer(config)
    model.set_attention(attend)
    parallelize(model, mesh, torch.bfloat16, activation_checkpointing=args.ac, compile_blocks=args.compile)
    with torch.no_grad():
        model.init_weights(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, config.vocab_size, (args.micro_batch, args.seq_len + 1), device=device)
    torch.cuda.synchronize()
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            torch.cuda.synchronize()
            started = time.perf_counter()
        logits = model(tokens[:, :-1])
        F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    per_gpu = args.steps * args.micro_batch * args.seq_len / seconds
    flops = per_gpu * flops_per_token(config, model.num_params(), args.seq_len)
    del model, optimizer
    torch.cuda.empty_cache()
    return per_gpu, flops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="1b")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--ac", action="store_true", help="activation checkpointing")
    parser.add_argument("--compile", action="store_true", help="torch.compile each block")
    args = parser.parse_args()
    dist.init_process_group("nccl")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    device_name, peak = peak_flops(device)
    chosen, attend = choose_attention(device, torch.bfloat16)
    runs = [("sdpa (baseline)", _sdpa)] + ([(chosen, attend)] if chosen == "flash_attn" else [])
    results = [(name, *measure(name, args.config, fn, args, mesh, device)) for name, fn in runs]
    if dist.get_rank() == 0:
        print(f"{args.config} on {dist.get_world_size()} x {device_name}; bf16 params, fp32 reduce; seq_len {args.seq_len}, "
              f"micro batch {args.micro_batch}, AC {args.ac}, compile {args.compile}; peak {peak / 1e12 if peak else 'unknown'} TFLOP/s")  # fmt: skip
        for name, per_gpu, flops in results:
            mfu = f"{flops / peak:.1%}" if peak else "unknown"
            print(f"{name:<18} {per_gpu:>10,.0f} tokens/s/GPU {flops / 1e12:>7.1f} TFLOP/s/GPU  MFU {mfu}"
                  f"  peak memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB")  # fmt: skip
        if len(results) == 2:
            print(f"ratio flash_attn / sdpa tokens/s: {results[1][1] / results[0][1]:.2f}x")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
