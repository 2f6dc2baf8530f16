"""The training loop: one process per rank, launched by torchrun."""

import json
import logging
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh

from training import checkpoint, storage
from training.export import write_model_config
from training.shard_contract import EOS_TOKEN, TOKENIZER_FILE
from training.attention import choose_attention
from training.config import TrainConfig
from training.data import MixtureLoader
from training.metrics import MetricsWriter, ProgressLine, SpikeDetector, peak_flops, peak_memory_mb
from training.mixture import Mixture
from training.model import Transformer, flops_per_token
from training.parallelize import parallelize
from training.schedule import lr_at

log = logging.getLogger("train")


def _setup_distributed() -> tuple[int, int, torch.device]:
    cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if cuda else "gloo", timeout=timedelta(minutes=10))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    return dist.get_rank(), dist.get_world_size(), device


def _optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2), foreach=True)


def train(config: TrainConfig, mixture: Mixture, out: Path, resume: bool) -> None:
    from tokenizers import Tokenizer

    rank, world, device = _setup_distributed()
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING, format="%(message)s", stream=sys.stdout)
    torch.manual_seed(config.seed)
    tokenizer = Tokenizer.from_str(storage.read_text(mixture.tokenizer_path()))
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    model_config = config.model_config_for(tokenizer.get_vocab_size())
    param_dtype = torch.bfloat16 if config.dtype == "bf16" or (config.dtype == "auto" and device.type == "cuda") else torch.float32

    # on GPUs the model is built on the meta device and initialized shard by shard; on CPU it is initialized whole
    # from the seed before sharding, so every rank count starts from the same weights
    with torch.device("meta" if device.type == "cuda" else "cpu"):
        model = Transformer(model_config)
    attention_name, attend = choose_attention(device, param_dtype, config.attention)
    model.set_attention(attend)
    num_params = model.num_params()
    mesh = init_device_mesh(device.type, (world,))
    parallelize(model, mesh, param_dtype, config.activation_checkpointing, config.compile)
    if device.type == "cuda":
        with torch.no_grad():
            model.init_weights(device)
    optimizer = _optimizer(model, config)
    loader = MixtureLoader(mixture, config.seq_len, config.global_batch, config.micro_batch, rank, world, config.seed, eos_id,
                           total_steps=config.steps)  # fmt: skip

    out.mkdir(parents=True, exist_ok=True)
    if rank == 0:  # what `train export` needs besides the checkpoint
        write_model_config(out, model_config)
        (out / TOKENIZER_FILE).write_text(tokenizer.to_str())
    start = 0
    found = checkpoint.latest(out / "checkpoints") if resume else None
    if found:
        state = checkpoint.load(found, model, optimizer)
        loader.load_state_dict(state["data"])
        start = state["step"]
    device_name, peak = peak_flops(device)
    per_token = flops_per_token(model_config, num_params, config.seq_len)
    if rank == 0:
        log.info(f"model {config.model}: {num_params / 1e6:.2f}M params, {per_token / 1e6:.1f} MFLOP/token; "
                 f"attention {attention_name}; {world} rank(s) on {device_name} ({'NCCL' if device.type == 'cuda' else 'gloo'}); "
                 f"params {param_dtype}; grad accumulation {loader.grad_accum}"
                 + (f"; resumed from {found.name}" if found else ""))  # fmt: skip
        if start >= config.steps:
            log.info(f"already at step {start} of {config.steps}: nothing to train (raise --steps to continue)")
    writer = MetricsWriter(out) if rank == 0 else None
    line = ProgressLine(config.steps, start) if rank == 0 else None
    spikes = SpikeDetector(config.spike_sigma)
    names = loader.names
    tokens_per_step = config.global_batch * config.seq_len
    timer = time.perf_counter()

    for step in range(start, config.steps):
        lr = lr_at(step, peak=config.lr, min_lr=config.min_lr, warmup=config.warmup, total=config.steps,
                   kind=config.schedule, decay_frac=config.decay_frac)  # fmt: skip
        for group in optimizer.param_groups:
            group["lr"] = lr
        batches = loader.next_step()
        sums = torch.zeros(2 * len(names), dtype=torch.float64, device=device)  # loss sums, then token counts
        for batch in batches:
            inputs, targets = batch.inputs.to(device), batch.targets.to(device)
            logits = model(inputs)
            token_loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)
            (token_loss.mean() / len(batches)).backward()
            sources = batch.sources.to(device)
            sums[: len(names)].index_add_(0, sources, token_loss.detach().sum(dim=1).double())
            sums[len(names) :].index_add_(0, sources, torch.full_like(sources, targets.shape[1], dtype=torch.float64))
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip)
        grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dist.all_reduce(sums)
        loss = (sums[: len(names)].sum() / sums[len(names) :].sum()).item()
        verdict = spikes(loss)
        done = step + 1

        if rank == 0:
            if verdict or (config.lineage_every and done % config.lineage_every == 0):
                entry = {"step": done, "loss": loss, "sequences": loader.last_step_documents()}
                if verdict:
                    writer.event({**entry, "event": verdict})
                    line.print(f"[yellow]step {done}: loss {loss:.4f} is a {verdict}; its documents are in events.jsonl[/]")
                else:
                    with open(out / "lineage.jsonl", "a") as handle:
                        handle.write(json.dumps(entry) + "\n")
            if done % config.log_every == 0 or done == config.steps:
                elapsed = time.perf_counter() - timer
                tokens_per_s = tokens_per_step * config.log_every / elapsed if elapsed > 0 else 0.0
                seen = loader.tokens_per_source()
                total_seen = sum(seen.values())
                counts = sums[len(names) :]
                record = {
                    "step": done,
                    "loss": loss,
                    "loss_per_source": {n: (sums[i] / counts[i]).item() for i, n in enumerate(names) if counts[i] > 0},
                    "tokens_per_source": seen,
                    "token_share": {n: seen[n] / total_seen for n in names},
                    "phase": mixture.phases[loader.phase].name,
                    "target_weight": dict(zip(names, mixture.weights(loader.phase))),
                    "lr": lr,
                    "grad_norm": grad_norm.item(),
                    "tokens_per_s": tokens_per_s,
                    "mfu": (tokens_per_s / world * per_token / peak) if peak else "unknown",
                    "peak_memory_mb": peak_memory_mb(device),
                }
                writer.log(record)
                mfu = f"{record['mfu']:.1%}" if peak else "unknown"
                line.update(done, loss, tokens_per_s, mfu)
                per_source = " ".join(f"{n} {v:.3f}" for n, v in record["loss_per_source"].items())
                line.print(f"step {done:>6}/{config.steps}  loss {loss:.4f} ({per_source})  lr {lr:.2e}  "
                           f"grad {record['grad_norm']:.3f}  {tokens_per_s:,.0f} tok/s  MFU {mfu}")  # fmt: skip
                timer = time.perf_counter()
        if done % config.checkpoint_every == 0 or done == config.steps:
            checkpoint.save(out / "checkpoints", done, model, optimizer, {"data": loader.state_dict()}, config.keep_checkpoints)

    if writer:
        writer.close()
        line.close()
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # gloo can abort at interpreter exit after destroy_process_group
