"""`train plan --gpus N`: the memory each parallel layout needs per GPU, before anything is launched.

Training state, 16 bytes per parameter, split as FSDP2 with MixedPrecisionPolicy(param bf16, reduce fp32) holds it:
the sharded parameter in fp32 (4, which is also AdamW's master copy), its fp32 gradient (4: gradients are reduced in
fp32) and Adam's m and v in fp32 (8). The bf16 copy (2 bytes) exists only for the layers being all-gathered: the
"FSDP buffers" column, the root's unsharded embeddings/output plus two blocks (the running one and the prefetched one).
In fp32 (CPU) the same 4 + 4 + 8 holds; only the gathered copies and the activations take 4 bytes a value instead of 2.

Sharding as each layout shards: FSDP divides all of it by dp_shard (HSDP replicates it across dp_replicate); TP
divides the block matmuls and the embeddings/output (vocab-parallel, torchtitan's plan) by tp, not the replicated
norms; PP gives each stage n_layers / pp blocks, the embeddings to the first and the final norm and output to the last
(a tied output is a second copy there). The figure of a layout is that of its fullest stage.

Activations per block, Korthikanti et al. 2022 (Reducing Activation Recomputation in Large Transformer Models, table
2): s b h (34 + 5 a s / h) bytes at 2 bytes a value, divided by t with TP + sequence parallel. The 5 a s / h term is
the stored s x s attention scores: the trainer's kernels (FlashAttention, SDPA flash/cuDNN, SDPA's CPU flash kernel)
never store them, so it is counted only with `scores_stored`. Full activation checkpointing keeps each block's input,
2 s b h / t, plus one block's working set while it is recomputed. Outside the blocks: the final norm's and output
layer's inputs (4 s b h / t) and the loss's 16 s b v bytes (fp32 logits kept, the log-softmax saved, and their two
fp32 gradients at the start of backward; measured, see benchmarks/memory_plan_vs_measured.py), not divided by t: the
trainer gathers the logits whole on every tensor-parallel rank for its per-token, per-source loss accounting. With PP (1F1B) the
first stage holds pp micro-batches in flight, the last one holds one and the logits.

Mixture of experts (the trainer runs it with FSDP and EP, no TP or PP): a layer holds its router and all its experts,
so the training state counts every expert (total parameters) and, sharded over efsdp x ep = dp_shard, divides as
FSDP alone would; what expert parallelism saves is the gathered copy (a block all-gathers only its num_experts / ep
experts). Activations of an MoE block: Korthikanti's attention and norms (15 s b h of the 34) plus, per token and
chosen expert (top_k routed plus the shared ones), its SwiGLU's input and four hidden-width intermediates, 2 (h + 4 f)
bytes, and the all-to-all's dispatched copies in and out (4 s b k h bytes) - an estimate from the shapes, not yet
checked against a measured run. Offload (FSDP2's CPUOffloadPolicy) moves the sharded parameters, gradients and
optimizer state to host memory: the GPU keeps the gathered copies and the activations.
"""

from dataclasses import dataclass

from training.model import ModelConfig

STATE_BYTES = {"params": 4, "grads": 4, "optimizer": 8}  # per parameter: fp32 master/sharded param, fp32 grad, Adam m + v
HEADROOM = 0.10  # of GPU memory, left to the allocator's fragmentation, NCCL buffers and the CUDA context
GiB = 2**30


@dataclass(frozen=True)
class Layout:
    dp_replicate: int
    dp_shard: int
    tp: int
    pp: int
    ep: int = 1  # expert parallel, inside dp_shard

    def describe(self) -> str:
        sizes = {"dp_replicate": self.dp_replicate, "dp_shard": self.dp_shard, "tp": self.tp, "pp": self.pp, "ep": self.ep}
        return " x ".join(f"{name} {size}" for name, size in sizes.items() if size > 1) or "one GPU"


@dataclass(frozen=True)
class Estimate:
    """Bytes per GPU on a layout's fullest stage."""

    layout: Layout
    params: float
    grads: float
    optimizer: float
    gathered: float  # FSDP's unsharded copies: the root's embeddings/output and two blocks, in the param dtype
    activations: float
    activations_ac: float  # with full activation checkpointing

    def state(self) -> float:
        """What offload moves to host memory: the sharded parameters, gradients and optimizer state."""
        return self.params + self.grads + self.optimizer

    def total(self, checkpointing: bool, offload: bool = False) -> float:
        kept = 0 if offload else self.state()
        return kept + self.gathered + (self.activations_ac if checkpointing else self.activations)


def block_params(config: ModelConfig, layer: int = 0) -> tuple[int, int, int]:
    """(matmul weights, norm weights, of the matmuls those of routed experts) of block `layer`."""
    kv = config.n_kv_heads * config.head_dim
    attention = 2 * config.dim * config.dim + 2 * config.dim * kv
    norms = 2 * config.dim + (2 * config.head_dim if config.qk_norm else 0)
    if not config.is_moe(layer):
        return attention + 3 * config.dim * config.ffn_hidden, norms, 0
    moe = config.moe
    experts = 3 * config.dim * moe.expert_hidden * moe.num_experts
    return attention + config.dim * moe.num_experts + experts + 3 * config.dim * moe.expert_hidden * moe.shared_experts, norms, experts


def num_params(config: ModelConfig) -> int:
    """Parameters of training.model.Transformer with this config, counted without building it."""
    blocks = sum(sum(block_params(config, layer)[:2]) for layer in range(config.n_layers))
    embeddings = config.vocab_size * config.dim
    return embeddings * (1 if config.tie_embeddings else 2) + blocks + config.dim


def layouts(config: ModelConfig, gpus: int, gpus_per_node: int) -> list[Layout]:
    """Every (dp_replicate, dp_shard, tp, pp) that multiplies to `gpus`, with tp inside a node and dividing the query
    and key/value heads, pp dividing the blocks, and replicas (HSDP) of whole nodes: replicating inside a node saves
    nothing on its fast links and costs memory. A mixture of experts: FSDP with every ep inside a node that divides
    dp_shard and the experts (the trainer has no TP, PP or HSDP for it)."""
    divisors = [d for d in range(1, gpus + 1) if gpus % d == 0]
    if config.moe_experts:
        return [Layout(1, gpus, 1, 1, ep) for ep in divisors if ep <= gpus_per_node and config.moe_experts % ep == 0]
    found = []
    for tp in divisors:
        if tp > gpus_per_node or config.n_heads % tp or config.n_kv_heads % tp:
            continue
        for pp in divisors:
            if (gpus // tp) % pp or config.n_layers % pp:
                continue
            rest = gpus // (tp * pp)
            found += [Layout(replicate, rest // replicate, tp, pp) for replicate in divisors
                      if rest % replicate == 0 and (replicate == 1 or (gpus // replicate) % gpus_per_node == 0)]  # fmt: skip
    return found


def estimate(config: ModelConfig, layout: Layout, seq_len: int, micro_batch: int, param_bytes: int = 2,
             scores_stored: bool = False) -> Estimate:  # fmt: skip
    """Per-GPU bytes of `layout` (see the module doc) for micro-batches of `micro_batch` x `seq_len` tokens, parameters
    gathered and activations kept at `param_bytes` a value (2: bf16, 4: fp32)."""
    t, s, b, h, v = layout.tp, seq_len, micro_batch, config.dim, config.vocab_size
    scale = param_bytes / 2  # Korthikanti's bytes are for 2-byte activations
    dense_block = s * b * h * (34 + (5 * config.n_heads * s / h if scores_stored else 0)) / t * scale

    def block_activations(layer: int) -> float:
        if not config.is_moe(layer):
            return dense_block
        moe = config.moe
        per_token_expert = 2 * (h + 4 * moe.expert_hidden) * scale
        return dense_block - 19 * s * b * h * scale + s * b * ((moe.top_k + moe.shared_experts) * per_token_expert
                                                            + 4 * moe.top_k * h * scale)  # fmt: skip

    def block_state(layer: int) -> tuple[float, float]:
        """(state per GPU before the dp_shard split, what one block's gathered copy holds)"""
        matmuls, norms, experts = block_params(config, layer)
        return matmuls / t + norms, (matmuls - experts + experts / layout.ep) / t + norms

    embeddings = v * h / t
    stages = []
    ends = [(True, True)] if layout.pp == 1 else [(True, False), (False, True)]  # (holds the embeddings, holds the output)
    per_stage = config.n_layers // layout.pp
    for index, (first, last) in enumerate(ends):
        layers = range(index * per_stage, (index + 1) * per_stage) if layout.pp > 1 else range(config.n_layers)
        states = [block_state(layer) for layer in layers]
        biggest = max(activation for activation in map(block_activations, layers))
        root = (embeddings if first else 0) + ((h + (embeddings if layout.pp > 1 or not config.tie_embeddings else 0)) if last else 0)
        params = sum(state for state, _ in states) + root
        in_flight = layout.pp if first else 1
        outside = (4 * s * b * h / t * scale + 16 * s * b * v) if last else 0  # logits whole on each tp rank
        kept = in_flight * sum(map(block_activations, layers)) + outside
        kept_ac = in_flight * len(layers) * 2 * s * b * h / t * scale + biggest + outside
        two_blocks = 2 * max(gathered for _, gathered in states)
        stage = Estimate(layout, *(params * size / layout.dp_shard for size in STATE_BYTES.values()),
                         gathered=(root + two_blocks) * param_bytes, activations=kept, activations_ac=kept_ac)  # fmt: skip
        stages.append(stage)
    return max(stages, key=lambda stage: stage.total(False))


def preference(estimate: Estimate, checkpointing: bool) -> tuple:
    """Fastest first: no PP, then the least TP (inside a node: the most communication-hungry split on the fastest
    links), then no recomputation, then the most replicas (HSDP: all-gathers over the fewest GPUs), then the most
    expert parallelism (inside a node: a token's hidden state travels instead of every expert's weights)."""
    layout = estimate.layout
    return layout.pp, layout.tp, checkpointing, -layout.dp_replicate, -layout.ep


def choose(estimates: list[Estimate], budget: float, offload: bool = False) -> tuple[Estimate, bool, str] | None:
    """The fastest (layout, activation checkpointing) whose total fits in `budget` bytes (with `offload`, what stays
    on the GPU), with the reason; None when none fits."""
    fitting = [(e, ac) for e in estimates for ac in (False, True) if e.total(ac, offload) <= budget]
    if not fitting:
        return None
    best, checkpointing = min(fitting, key=lambda pair: preference(*pair))
    layout = best.layout
    if layout.pp > 1:
        reason = f"no layout fits with TP inside a node alone: {layout.pp} pipeline stages (across nodes) with TP {layout.tp}"
    elif layout.tp > 1:
        reason = f"data parallelism alone does not fit: TP {layout.tp} inside a node, the least that fits"
    else:
        reason = "fits with data parallelism alone (no TP or PP)"
    if layout.dp_replicate > 1:
        reason += f", replicated {layout.dp_replicate} times (HSDP: the fewest GPUs per all-gather that fit)"
    if layout.ep > 1:
        reason += (f", experts split {layout.ep} ways inside a node (EP: each GPU gathers 1/{layout.ep} of a layer's experts, "
                   "tokens travel by all-to-all)")  # fmt: skip
    reason += ", with activation checkpointing (the only way it fits)" if checkpointing else ", no activation recomputation"
    return best, checkpointing, reason
