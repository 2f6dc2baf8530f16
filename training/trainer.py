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
from training.attention import choose_attention
from training.config import TrainConfig
from training.data import MixtureLoader
from training.export import write_model_config
from training.metrics import MetricsWriter, ProgressLine, SpikeDetector, peak_flops, peak_memory_mb
from training.mixture import Mixture
from training.model import Transformer, flops_per_token
from training.parallelize import parallelize
from training.schedule import lr_at
from training.shard_contract import EOS_TOKEN, TOKENIZER_FILE

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


def train_step(model, optimizer, batches, sources: int, device: torch.device, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward over the step's micro-batches, clip, optimizer step. Returns the per-source loss sums
    followed by the per-source token counts (summed over all ranks) and the gradient norm."""
    sums = torch.zeros(2 * sources, dtype=torch.float64, device=device)
    for batch in batches:
        inputs, targets = batch.inputs.to(device), batch.targets.to(device)
        logits = model(inputs)
        token_loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)
        (token_loss.mean() / len(batches)).backward()
        source = batch.sources.to(device)
        sums[:sources].index_add_(0, source, token_loss.detach().sum(dim=1).double())
        sums[sources:].index_add_(0, source, torch.full_like(source, targets.shape[1], dtype=torch.float64))
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    dist.all_reduce(sums)
    return sums, grad_norm


class StepLog:
    """Rank 0's view of each step: spikes and lineage to events.jsonl / lineage.jsonl, metrics every `log_every`
    steps to metrics.jsonl (and TensorBoard), and the progress line."""

    def __init__(self, config: TrainConfig, mixture: Mixture, loader: MixtureLoader, out: Path, start: int, world: int,
                 per_token: float, peak: float | None, device: torch.device):  # fmt: skip
        self.config, self.mixture, self.loader, self.out = config, mixture, loader, out
        self.world, self.per_token, self.peak, self.device = world, per_token, peak, device
        self.writer, self.line = MetricsWriter(out), ProgressLine(config.steps, start)
        self.tokens_per_step = config.global_batch * config.seq_len
        self.timer = time.perf_counter()

    def __call__(self, done: int, loss: float, verdict: str | None, sums: torch.Tensor, grad_norm: torch.Tensor, lr: float) -> None:
        config, loader, names = self.config, self.loader, self.loader.names
        if verdict or (config.lineage_every and done % config.lineage_every == 0):
            entry = {"step": done, "loss": loss, "sequences": loader.last_step_documents()}
            if verdict:
                self.writer.event({**entry, "event": verdict})
                self.line.print(f"[yellow]step {done}: loss {loss:.4f} is a {verdict}; its documents are in events.jsonl[/]")
            else:
                with open(self.out / "lineage.jsonl", "a") as handle:
                    handle.write(json.dumps(entry) + "\n")
        if done % config.log_every and done != config.steps:
            return
        elapsed = time.perf_counter() - self.timer
        tokens_per_s = self.tokens_per_step * config.log_every / elapsed if elapsed > 0 else 0.0
        seen = loader.tokens_per_source()
        total_seen = sum(seen.values())
        counts = sums[len(names) :]
        record = {
            "step": done,
            "loss": loss,
            "loss_per_source": {n: (sums[i] / counts[i]).item() for i, n in enumerate(names) if counts[i] > 0},
            "tokens_per_source": seen,
            "token_share": {n: seen[n] / total_seen for n in names},
            "phase": self.mixture.phases[loader.phase].name,
            "target_weight": dict(zip(names, self.mixture.weights(loader.phase))),
            "lr": lr,
            "grad_norm": grad_norm.item(),
            "tokens_per_s": tokens_per_s,
            "mfu": (tokens_per_s / self.world * self.per_token / self.peak) if self.peak else "unknown",
            "peak_memory_mb": peak_memory_mb(self.device),
        }
        self.writer.log(record)
        mfu = f"{record['mfu']:.1%}" if self.peak else "unknown"
        self.line.update(done, loss, tokens_per_s, mfu)
        per_source = " ".join(f"{n} {v:.3f}" for n, v in record["loss_per_source"].items())
        self.line.print(f"step {done:>6}/{config.steps}  loss {loss:.4f} ({per_source})  lr {lr:.2e}  "
                        f"grad {record['grad_norm']:.3f}  {tokens_per_s:,.0f} tok/s  MFU {mfu}")  # fmt: skip
        self.timer = time.perf_counter()

    def close(self) -> None:
        self.writer.close()
        self.line.close()


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
    step_log = StepLog(config, mixture, loader, out, start, world, per_token, peak, device) if rank == 0 else None
    spikes = SpikeDetector(config.spike_sigma)
    for step in range(start, config.steps):
        lr = lr_at(step, peak=config.lr, min_lr=config.min_lr, warmup=config.warmup, total=config.steps,
                   kind=config.schedule, decay_frac=config.decay_frac)  # fmt: skip
        for group in optimizer.param_groups:
            group["lr"] = lr
        sums, grad_norm = train_step(model, optimizer, loader.next_step(), len(loader.names), device, config.clip)
        loss = (sums[: len(loader.names)].sum() / sums[len(loader.names) :].sum()).item()
        verdict = spikes(loss)
        done = step + 1
        if step_log:
            step_log(done, loss, verdict, sums, grad_norm, lr)
        if done % config.checkpoint_every == 0 or done == config.steps:
            checkpoint.save(out / "checkpoints", done, model, optimizer, {"data": loader.state_dict()}, config.keep_checkpoints)

    if step_log:
        step_log.close()
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # gloo can abort at interpreter exit after destroy_process_group
