"""Apply TP (+ sequence parallel) -> activation checkpointing -> torch.compile -> FSDP2 / HSDP, in that order
(torchtitan's parallelize_llama, on one screen). The pipeline split, when there is one, happens before (pipeline.py)."""

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from training.model import Transformer

# How close every layout's loss (and loss per source, validation loss) stays to one rank's, relative, per step, in
# fp32 (tests/test_parallelism.py; docs/training.md quotes it). Sharded reductions and split matmuls sum in another
# order: seen 2.5e-8 to 4.2e-8 at lr 3e-4; a layout bug (a wrong shard, a missing reduction) moves the loss by far more.
LOSS_PARITY_RTOL = 1e-5


def apply_tp(model: Transformer, tp: DeviceMesh) -> None:
    """Megatron's split with sequence parallelism: activations between blocks (and the norms over them) are sharded
    along the sequence; attention heads and the FFN's hidden units are split over the tp ranks. The logits are
    gathered whole (the per-token losses and per-source accounting read them)."""
    top = {"norm": SequenceParallel(), "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())}
    if model.tok_embeddings is not None:
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    parallelize_module(model, tp, {name: plan for name, plan in top.items() if getattr(model, name) is not None})
    block_plan = {
        "attention_norm": SequenceParallel(),
        "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None), desired_input_layouts=(Replicate(), None, None)),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        "feed_forward.w3": ColwiseParallel(),
    }
    for block in model.layers.values():
        parallelize_module(block, tp, block_plan)
    if model.config.tie_embeddings:  # both are sharded by vocabulary row; tie them again after distributing
        model.output.weight = model.tok_embeddings.weight


def parallelize(model: Transformer, tp: DeviceMesh | None, fsdp: DeviceMesh, param_dtype: torch.dtype,
                activation_checkpointing: bool, compile_blocks: bool) -> Transformer:  # fmt: skip
    if tp is not None and tp.size() > 1:
        apply_tp(model, tp)
    for name, block in model.layers.items():
        if activation_checkpointing:
            block = checkpoint_wrapper(block, preserve_rng_state=False)
        if compile_blocks:
            block = torch.compile(block, fullgraph=True)
        model.layers[name] = block
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    blocks = list(model.layers.values())
    for index, block in enumerate(blocks):
        # the last block's parameters are needed right away by backward: no point resharding them after forward
        fully_shard(block, mesh=fsdp, mp_policy=policy, reshard_after_forward=index < len(blocks) - 1)
    fully_shard(model, mesh=fsdp, mp_policy=policy)
    return model
