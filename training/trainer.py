"""The training loop: one process per rank, launched by torchrun."""

import json
import logging
import math
import os
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F

from training import checkpoint, fp8, optimizer as optimizers, storage
from training.attention import choose_attention
from training.config import TrainConfig
from training.data import MixtureLoader, ValidationSet, read_sources
from training.export import write_model_config
from training.metrics import LINEAGE_FILE, MetricsWriter, ProgressLine, SpikeDetector, keep_through, peak_flops, peak_memory_mb
from training.mixture import Mixture
from training.mesh import Meshes, build, by_device_mesh
from training.model import Transformer, flops_per_token
from training.parallelize import parallelize
from training.schedule import lr_at
from training.weight_average import TailAverage
from shard_contract import EOS_TOKEN, TOKENIZER_FILE

if TYPE_CHECKING:  # torch's pipelining imports sympy (over a second per rank): loaded only for a pipeline
    from training.pipeline import Pipeline

log = logging.getLogger("train")


def _setup_distributed() -> tuple[int, int, torch.device]:
    cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if cuda else "gloo", timeout=timedelta(minutes=10))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    return dist.get_rank(), dist.get_world_size(), device


def _quiet_layout_notes() -> None:
    """Two notes torch prints on every rank and step of a tensor-parallel run, neither about this trainer: the logits
    are a view (nothing here changes them in place), and the gradient norm over a 2-D mesh takes two all-reduces."""
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)


def _accumulate(sums: torch.Tensor, width: int, token_loss: torch.Tensor, sources: torch.Tensor) -> None:
    """Add a micro-batch's loss sums and token counts per source into `sums` ([losses | counts], `width` each)."""
    sums[:width].index_add_(0, sources, token_loss.sum(dim=1).double())
    sums[width : 2 * width].index_add_(0, sources, torch.full_like(sources, token_loss.shape[1], dtype=torch.float64))


def _token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per target token, (micro_batch, seq_len), from the logits (taken in fp32)."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)


class Objective:
    """The loss a micro-batch's backward starts from (mean token loss, plus PaLM's z-loss when weighted, plus the MoE
    layers' load-balancing and router z-losses), keeping each call's per-token losses and z-loss sum, and the step's
    router statistics, for the step's accounting; called by the trainer, or by the pipeline schedule on the last stage
    (right after the forward whose routers it reads)."""

    def __init__(self, z_loss: float, moe_layers: list | None = None, balance: float = 0.0, router_z: float = 0.0):
        self.z_loss, self.calls = z_loss, []
        self.moe_layers, self.balance, self.router_z = moe_layers or [], balance, router_z
        self.router = None  # per MoE layer: [balance loss sum, router z-loss sum, micro-batches, tokens per expert...]

    def reset(self, device: torch.device) -> None:
        self.calls = []
        if self.moe_layers:
            experts = self.moe_layers[0][1].config.num_experts
            self.router = torch.zeros(len(self.moe_layers), 3 + experts, dtype=torch.float64, device=device)

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        token_loss = _token_loss(logits, targets)
        objective, z_sum = token_loss.mean(), torch.zeros((), dtype=torch.float64, device=logits.device)
        if self.z_loss:  # keeps the softmax normalizer near 1, against logit drift in bf16
            log_z_squared = torch.logsumexp(logits.float(), dim=-1).pow(2)
            objective = objective + self.z_loss * log_z_squared.mean()
            z_sum = log_z_squared.detach().sum().double()
        for index, (_, moe) in enumerate(self.moe_layers):
            stats = moe.stats
            objective = objective + self.balance * stats.balance_loss + self.router_z * stats.z_loss
            self.router[index, :2] += torch.stack([stats.balance_loss.detach(), stats.z_loss.detach()]).double()
            self.router[index, 2] += 1
            self.router[index, 3:] += stats.tokens_per_expert.double()
        self.calls.append((token_loss.detach(), z_sum))
        return objective


def forward_backward(model, pipeline: "Pipeline | None", batches, sources: int, device: torch.device, objective: Objective,
                     meshes: Meshes) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Forward and backward over the step's micro-batches (through the pipeline: the step cut in pp_microbatches, by
    default as many as the loader's). Returns, summed over all ranks, the per-source loss sums, the per-source token
    counts and the z-loss sum; and this data-parallel rank's mean loss per sequence, in plan order (zeros on the ranks
    that do not own the loss)."""
    objective.reset(device)
    count = meshes.layout.pp_microbatches or len(batches)
    if pipeline:
        pipeline.step(torch.cat([b.inputs for b in batches]), torch.cat([b.targets for b in batches]), count)
    else:
        for batch in batches:
            (objective(model(batch.inputs.to(device)), batch.targets.to(device)) / len(batches)).backward()
    sums = torch.zeros(2 * sources + 1, dtype=torch.float64, device=device)
    per_sequence = torch.zeros(sum(len(b.sources) for b in batches), device=device)
    if meshes.owns_loss:
        calls = objective.calls[-count:]  # a schedule's first step adds a placeholder call
        token_loss = torch.cat([losses for losses, _ in calls])
        _accumulate(sums, sources, token_loss, torch.cat([b.sources for b in batches]).to(device))
        sums[-1] += sum(z_sum for _, z_sum in calls)
        per_sequence = token_loss.mean(dim=1)
    dist.all_reduce(sums)
    if objective.router is not None:
        dist.all_reduce(objective.router)  # the step's expert loads over every data-parallel rank
    return sums, per_sequence


def _logits(model, pipeline: "Pipeline | None", inputs: torch.Tensor, device: torch.device) -> torch.Tensor | None:
    return pipeline.forward(inputs) if pipeline else model(inputs.to(device))


def optimizer_step(model, optimizer, clip: float, apply: bool, meshes: Meshes) -> torch.Tensor:
    """Clip and step (or, for a skipped spike, drop the gradients); returns the gradient norm before clipping, over
    the whole model (a pipeline stage's norm joined with the other stages'). Gradients on different device meshes
    (dense parameters', experts' under expert parallelism) are normed and clipped apart: DTensor ops stay on one mesh."""
    by_mesh = by_device_mesh([p for p in model.parameters() if p.grad is not None], of=lambda p: p.grad)
    norms = []
    for parameters in by_mesh.values():
        norm = torch.nn.utils.get_total_norm([p.grad for p in parameters], foreach=True)
        norms.append(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    grad_norm = torch.stack(norms).norm() if len(norms) > 1 else norms[0]
    if meshes.layout.pp > 1:
        grad_norm = grad_norm.pow(2)
        dist.all_reduce(grad_norm, group=meshes.pp.get_group())
        grad_norm = grad_norm.sqrt()
    for parameters in by_mesh.values():
        torch.nn.utils.clip_grads_with_norm_(parameters, clip, grad_norm, foreach=True)
    if apply:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm


LOGGED, SKIPPED, REWOUND = "logged", "skipped the update", "rewound to"


def spike_action(policy: str, verdict: str | None, latest: Path | None, rewound_here: bool) -> str | None:
    """What a step does about a spike: nothing (no spike), log it, skip its update, or rewind to `latest` (only with a
    checkpoint to go back to, and once per step: a spike that recurs after a rewind is skipped)."""
    if not verdict:
        return None
    if policy == "rewind" and latest is not None and not rewound_here:
        return f"{REWOUND} {latest.name}"
    return LOGGED if policy == "log" else SKIPPED


def evaluate(model, pipeline: "Pipeline | None", batches, sources: int, device: torch.device, meshes: Meshes) -> torch.Tensor:
    """Validation loss sums then token counts per source, over all ranks (padding rows dropped)."""
    sums = torch.zeros(2 * (sources + 1), dtype=torch.float64, device=device)
    with torch.no_grad():
        for batch in batches:
            logits = _logits(model, pipeline, batch.inputs, device)
            if meshes.owns_loss:
                _accumulate(sums, sources + 1, _token_loss(logits, batch.targets.to(device)), batch.sources.to(device))
    dist.all_reduce(sums)
    return torch.cat([sums[:sources], sums[sources + 1 : 2 * sources + 1]])


def offending_documents(loader: MixtureLoader, per_sequence: torch.Tensor, threshold: float, meshes: Meshes) -> dict[str, list[str]]:
    """The documents of the spike's sequences that are themselves over the threshold (or not finite); all the
    batch's documents when the spike is spread over it. Every rank calls it (it sums the sequence losses each
    data-parallel slice's loss owner holds into the global batch's order)."""
    losses = torch.zeros(len(per_sequence) * meshes.dp.size(), device=per_sequence.device)
    start = meshes.dp.get_local_rank() * len(per_sequence)
    losses[start : start + len(per_sequence)] = per_sequence
    dist.all_reduce(losses)
    losses = losses.cpu()
    bad = ~torch.isfinite(losses) | (losses > threshold)
    chosen = bad if bad.any() else torch.ones_like(bad)
    documents: dict[str, dict[str, None]] = {}
    for sequence, keep in zip(loader.last_step_documents(), chosen.tolist()):
        if keep:
            documents.setdefault(sequence["source"], {}).update(dict.fromkeys(sequence["doc_ids"]))
    return {source: list(ids) for source, ids in documents.items()}


class StepLog:
    """Rank 0's view of each step: spikes and lineage to events.jsonl / lineage.jsonl, metrics every `log_every`
    steps and at each validation to metrics.jsonl (and TensorBoard), and the progress line."""

    def __init__(self, config: TrainConfig, mixture: Mixture, loader: MixtureLoader, out: Path, start: int, world: int,
                 model_config, num_params: int, peak: float | None, device: torch.device):  # fmt: skip
        self.config, self.mixture, self.loader, self.out = config, mixture, loader, out
        self.world, self.model_config, self.num_params, self.peak, self.device = world, model_config, num_params, peak, device
        self.writer, self.line = MetricsWriter(out), ProgressLine(config.steps, start)
        self.timer, self.tokens = time.perf_counter(), 0
        self.collapsed: set[str] = set()  # MoE layers already warned about

    def event(self, record: dict, message: str) -> None:
        self.writer.event(record)
        self.line.print(f"[yellow]{message}[/]")

    def __call__(self, done: int, loss: float, verdict: str | None, sums: torch.Tensor, grad_norm: torch.Tensor, lr: float,
                 validation: torch.Tensor | None, eval_seconds: float, router: torch.Tensor | None = None) -> None:  # fmt: skip
        config, loader, names = self.config, self.loader, self.loader.names
        shape = loader.last_shape
        self.tokens += shape.tokens_per_step
        experts = router_record(router, self.model_config) if router is not None else None
        if experts and done > config.warmup:  # a router at its random start is not yet a collapsed one
            self.warn_collapsed(done, experts)
        if config.lineage_every and done % config.lineage_every == 0 and not verdict:
            with open(self.out / LINEAGE_FILE, "a") as handle:
                handle.write(json.dumps({"step": done, "loss": loss, "sequences": loader.last_step_documents()}) + "\n")
        if done % config.log_every and done != config.steps and validation is None:
            return
        elapsed = time.perf_counter() - self.timer - eval_seconds
        tokens_per_s = self.tokens / elapsed if elapsed > 0 else 0.0
        seen = loader.tokens_per_source()
        total_seen = sum(seen.values())
        counts = sums[len(names) : 2 * len(names)]
        per_token = flops_per_token(self.model_config, self.num_params, shape.seq_len)
        record = {
            "step": done,
            "loss": loss,
            "loss_per_source": {n: (sums[i] / counts[i]).item() for i, n in enumerate(names) if counts[i] > 0},
            "tokens_per_source": seen,
            "token_share": {n: seen[n] / total_seen for n in names},
            "phase": self.mixture.phases[loader.phase].name,
            "target_weight": dict(zip(names, self.mixture.weights(loader.phase))),
            "seq_len": shape.seq_len,
            "tokens_per_step": shape.tokens_per_step,
            "lr": lr,
            "grad_norm": grad_norm.item(),
            "tokens_per_s": tokens_per_s,
            "mfu": (tokens_per_s / self.world * per_token / self.peak) if self.peak else "unknown",
            "peak_memory_mb": peak_memory_mb(self.device),
        }
        if config.z_loss:
            record["z_loss"] = (sums[-1] / counts.sum()).item()
        if experts:
            record["moe"] = experts
        validation_text = ""
        if validation is not None:
            held = validation[len(names) :]
            record["val_loss"] = (validation[: len(names)].sum() / held.sum()).item()
            record["val_loss_per_source"] = {n: (validation[i] / held[i]).item() for i, n in enumerate(names) if held[i] > 0}
            validation_text = f"  val {record['val_loss']:.4f}"
        self.writer.log(record)
        mfu = f"{record['mfu']:.1%}" if self.peak else "unknown"
        self.line.update(done, loss, tokens_per_s, mfu)
        per_source = " ".join(f"{n} {v:.3f}" for n, v in record["loss_per_source"].items())
        self.line.print(f"step {done:>6}/{config.steps}  loss {loss:.4f} ({per_source}){validation_text}  lr {lr:.2e}  "
                        f"grad {record['grad_norm']:.3f}  {tokens_per_s:,.0f} tok/s  MFU {mfu}")  # fmt: skip
        self.timer, self.tokens = time.perf_counter(), 0

    def warn_collapsed(self, done: int, experts: dict) -> None:
        """One line (and an event) the first time a layer's router has collapsed: its busiest expert took over half the
        tokens and three times a fair share (top_k / experts)."""
        fair = self.model_config.moe_top_k / self.model_config.moe_experts
        for layer, share in experts["busiest_share"].items():
            if share > min(1.0, max(0.5, 3 * fair)) and layer not in self.collapsed:
                self.collapsed.add(layer)
                self.event({"step": done, "event": "collapsed router", "layer": layer, "busiest_share": share},
                           f"step {done}: MoE layer {layer}'s router sends {share:.0%} of tokens to one expert (a fair "
                           f"share is {fair:.0%}): raise moe_balance_loss or use moe_bias_balancing")  # fmt: skip

    def close(self) -> None:
        self.writer.close()
        self.line.close()


def router_record(router: torch.Tensor, model_config) -> dict:
    """The step's MoE metrics from the objective's per-layer sums (all ranks'): mean balancing and router z-losses,
    tokens per expert, each layer's max/mean load and the share of tokens its busiest expert took."""
    router = router.cpu()
    calls, load = router[:, 2].clamp(min=1), router[:, 3:]
    layers = [str(layer) for layer in range(model_config.n_layers) if model_config.is_moe(layer)]
    tokens = load.sum(1) / model_config.moe_top_k
    return {
        "balance_loss": (router[:, 0] / calls).mean().item(),
        "router_z_loss": (router[:, 1] / calls).mean().item(),
        "tokens_per_expert": {layer: row.long().tolist() for layer, row in zip(layers, load)},
        "max_over_mean_load": {layer: (row.max() / row.mean()).item() for layer, row in zip(layers, load) if row.sum() > 0},
        "busiest_share": {layer: (row.max() / n).item() for layer, row, n in zip(layers, load, tokens) if n > 0},
    }


def train(config: TrainConfig, mixture: Mixture, out: Path, resume: bool) -> None:
    from tokenizers import Tokenizer

    rank, world, device = _setup_distributed()
    meshes = build(config.parallelism.resolve(world), device.type)
    layout, dp_rank, dp_world = meshes.layout, meshes.dp.get_local_rank(), meshes.dp.size()
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING, format="%(message)s", stream=sys.stdout)
    _quiet_layout_notes()
    torch.manual_seed(config.seed)
    tokenizer = Tokenizer.from_str(storage.read_text(mixture.tokenizer_path()))
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    base = config.base_shape()
    shapes = mixture.shapes(base)
    model_config = config.model_config_for(tokenizer.get_vocab_size(), max(shape.seq_len for shape in shapes))
    param_dtype = torch.bfloat16 if config.dtype == "bf16" or (config.dtype == "auto" and device.type == "cuda") else torch.float32

    # on GPUs the model is built on the meta device and initialized shard by shard; on CPU it is initialized whole
    # from the seed before sharding, so every rank count starts from the same weights
    with torch.device("meta" if device.type == "cuda" else "cpu"):
        model = Transformer(model_config)
    attention_name, attend = choose_attention(device, param_dtype, config.attention)
    model.set_attention(attend)
    num_params, active_params = model.num_params(), model.num_params(active=True)  # FLOPs and MFU count the active
    layout.check_model(model_config)
    fp8.convert(model, config.fp8, device)
    if layout.pp > 1:
        from training.pipeline import Pipeline, split

        split(model, meshes.pp.get_local_rank(), layout.pp)
    parallelize(model, meshes.tp, meshes.fsdp, param_dtype, config.activation_checkpointing, config.compile, config.offload,
                meshes.experts)
    if device.type == "cuda":
        with torch.no_grad():  # offloaded parameters stay in host memory; the buffers (RoPE tables) go to the GPU
            if config.offload:
                model.init_weights(torch.device("cpu"), buffer_device=device)
            else:
                model.init_weights(device)
    optimizer = optimizers.build(model, config.optimizer, config.lr, config.weight_decay, (config.beta1, config.beta2),
                                 config.muon_momentum)  # fmt: skip
    shards = read_sources(mixture)  # read once for the training streams and the held-out slice
    moe_layers = model.moe_layers()
    objective = Objective(config.z_loss, moe_layers, config.moe_balance_loss, config.moe_router_z_loss)
    pipeline = Pipeline(model, meshes, device, param_dtype, objective) if layout.pp > 1 else None
    loader = MixtureLoader(mixture, config.seq_len, config.global_batch, config.micro_batch, dp_rank, dp_world, config.seed, eos_id,
                           total_steps=config.steps, rope_theta=base.rope_theta, shards=shards,
                           shuffle_sequences=config.shuffle_sequences)  # fmt: skip
    validation = ValidationSet(mixture, eos_id, config.eval_sequences, shards) if config.eval_every else None

    out.mkdir(parents=True, exist_ok=True)
    if rank == 0:  # what `train export` needs besides the checkpoint
        write_model_config(out, model_config)
        (out / TOKENIZER_FILE).write_text(tokenizer.to_str())
    start = 0
    average = TailAverage(model, config.steps, config.average_last) if config.average_last else None
    found = checkpoint.latest(out / "checkpoints") if resume else None
    if found:
        state = checkpoint.load(found, model, optimizer, average and average.state(checkpoint.step_of(found)))
        loader.load_state_dict(state["data"])
        start = state["step"]
    device_name, peak = peak_flops(device)
    if rank == 0:
        keep_through(out, start)
        active = f" ({active_params / 1e6:.2f}M active)" if active_params != num_params else ""
        log.info(f"model {config.model}: {num_params / 1e6:.2f}M params{active}, "
                 f"{flops_per_token(model_config, active_params, config.seq_len) / 1e6:.1f} MFLOP/token; "
                 f"attention {attention_name}; {world} rank(s) on {device_name} ({'NCCL' if device.type == 'cuda' else 'gloo'}), "
                 f"{layout.describe()}; "
                 f"params {param_dtype}; grad accumulation {loader.grad_accum}"
                 + (f"; resumed from {found.name}" if found else ""))  # fmt: skip
        for phase, shape, first in zip(mixture.phases, shapes, loader.phase_start_steps):
            if shape != base or len(shapes) > 1:
                log.info(f"phase {phase.name}: from step {first}, seq_len {shape.seq_len}, {shape.tokens_per_step:,} tokens/step, "
                         f"RoPE {shape.rope}")  # fmt: skip
        if mixture.batch_ramp:
            log.info("batch ramp: global batch " + ", ".join(f"{shapes[0].global_batch // divisor} from step {first}"
                                                             for first, divisor in loader.ramp))  # fmt: skip
        if validation:
            missing = validation.missing(max(shape.seq_len for shape in shapes))
            if missing:
                log.info(f"validation: {missing} hold out less than one sequence: tokenize with --validation-fraction or "
                         "name validation_paths in the mixture")  # fmt: skip
    step_log = StepLog(config, mixture, loader, out, start, world, model_config, active_params, peak, device) if rank == 0 else None
    spikes = SpikeDetector(config.spike_sigma)
    rewound: set[int] = set()
    n, step = len(loader.names), start
    while step < config.steps:
        shape = loader.shape
        if (shape.rope_theta, shape.rope_scaling) != (model.config.rope_theta, model.config.rope_scaling):
            model.set_rope(shape.rope_theta, shape.rope_scaling)
        lr = lr_at(step, peak=config.lr, min_lr=config.min_lr, warmup=config.warmup, total=config.steps,
                   kind=config.schedule, decay_frac=config.decay_frac)  # fmt: skip
        for group in optimizer.param_groups:
            group["lr"] = lr
        threshold = spikes.threshold()
        sums, per_sequence = forward_backward(model, pipeline, loader.next_step(), n, device, objective, meshes)
        loss = (sums[:n].sum() / sums[n : 2 * n].sum()).item()
        verdict = spikes(loss)
        done = step + 1
        latest = checkpoint.latest(out / "checkpoints") if verdict and config.spike_policy == "rewind" else None
        action = spike_action(config.spike_policy, verdict, latest, done in rewound)
        grad_norm = optimizer_step(model, optimizer, config.clip, action in (None, LOGGED), meshes)
        if action in (None, LOGGED) and model.config.moe_bias_balancing:
            for (_, moe), row in zip(moe_layers, objective.router):
                moe.balance_bias(row[3:], config.moe_bias_rate)
        if verdict:
            documents = offending_documents(loader, per_sequence, threshold, meshes)
            if step_log:
                record = {"step": done, "loss": loss, "event": verdict, "threshold": threshold if math.isfinite(threshold) else None,
                          "action": action, "documents": documents, "sequences": loader.last_step_documents()}  # fmt: skip
                step_log.event(record, f"step {done}: loss {loss:.4f} is a {verdict}: {action}; "
                                       f"its documents are in events.jsonl")  # fmt: skip
            if action.startswith(REWOUND):
                rewound.add(done)
                state = checkpoint.load(latest, model, optimizer, average and average.state(checkpoint.step_of(latest)))
                loader.load_state_dict(state["data"])
                loader.skip(documents)
                step = state["step"]
                continue
        if average:
            average.update(done)
            if done == config.steps:
                average.apply()
        eval_seconds, scores = 0.0, None
        if validation and (done % config.eval_every == 0 or done == config.steps):
            began = time.perf_counter()
            batches = validation.batches(shape.seq_len, shape.micro_batch, dp_rank, dp_world)
            scores = evaluate(model, pipeline, batches, n, device, meshes) if batches else None
            eval_seconds = time.perf_counter() - began
        if step_log:
            step_log(done, loss, verdict, sums, grad_norm, lr, scores, eval_seconds, objective.router)
        if done % config.checkpoint_every == 0 or done == config.steps:
            train_state = {"data": loader.state_dict(), "rope": {"theta": model.config.rope_theta, "scaling": model.config.rope_scaling}}
            if validation:
                train_state["validation"] = validation.fingerprint
            checkpoint.save(out / "checkpoints", done, model, optimizer, train_state, config.keep_checkpoints,
                            average and average.state(done))
        step = done

    if step_log:
        step_log.close()
    dist.barrier()
    dist.destroy_process_group()
