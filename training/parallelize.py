"""Apply TP (+ sequence parallel) -> activation checkpointing -> torch.compile -> FSDP2 / HSDP, in that order
(torchtitan's parallelize_llama, on one screen). The pipeline split, when there is one, happens before (pipeline.py)."""

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from training.model import Transformer
from training.moe import MoEFeedForward

# How close every layout's loss (and loss per source, validation loss) stays to one rank's, relative, per step, in
# fp32 (tests/test_parallelism.py; docs/training.md quotes it). Sharded reductions and split matmuls sum in another
# order: seen 2.5e-8 to 4.2e-8 at lr 3e-4; a layout bug (a wrong shard, a missing reduction) moves the loss by far more.
LOSS_PARITY_RTOL = 1e-5
# The gradient norm before clipping, likewise: a norm of sharded gradients sums its squares in another order, and a
# wrong gradient scale (a reduction divided twice) moves it by the factor, far more.
GRAD_NORM_PARITY_RTOL = 1e-3


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


def apply_ep(model: Transformer, experts: DeviceMesh, policy: MixedPrecisionPolicy, placement: OffloadPolicy) -> None:
    """Expert parallelism: each MoE layer's stacked expert weights become DTensors sharded by expert over `experts`'
    ep dimension (a rank keeps num_experts / ep of them; checkpoints keep the global shape, so they move between
    layouts), dispatched to by all-to-all (training.moe), then FSDP-sharded over efsdp. A rank's expert gradients
    sum the contributions of every ep rank's tokens, so FSDP divides them by all of dp_shard, not by efsdp alone."""
    for _, moe in model.moe_layers():
        for name, param in list(moe.experts.named_parameters(recurse=False)):
            moe.experts.register_parameter(name, nn.Parameter(distribute_tensor(param.data, experts["ep"], [Shard(0)])))
        moe.ep_group = experts["ep"].get_group()
        fully_shard(moe.experts, mesh=experts["efsdp"], mp_policy=policy, offload_policy=placement)
        moe.experts.set_gradient_divide_factor(float(experts.size()))
        if experts["efsdp"].size() > 1:  # sum, then divide: gloo has no pre-multiplied sum. Not on one efsdp rank, where
            moe.experts.set_force_sum_reduction_for_comms(True)  # FSDP divides once more (torch 2.13; the grad-norm test)


def parallelize(model: Transformer, tp: DeviceMesh | None, fsdp: DeviceMesh, param_dtype: torch.dtype,
                activation_checkpointing: bool, compile_blocks: bool, offload: bool = False,
                experts: DeviceMesh | None = None) -> Transformer:  # fmt: skip
    """`offload`: FSDP2's CPUOffloadPolicy, sharded parameters, gradients and optimizer state in host memory, copied
    to the device for each block's all-gather (pinned on CUDA for asynchronous copies). `experts`: the efsdp x ep mesh
    of expert parallelism."""
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    placement = CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if offload else OffloadPolicy()
    if tp is not None and tp.size() > 1:
        apply_tp(model, tp)
    if experts is not None:
        apply_ep(model, experts, policy, placement)
    for name, block in model.layers.items():
        routed = isinstance(block.feed_forward, MoEFeedForward)
        if activation_checkpointing:
            block = checkpoint_wrapper(block, preserve_rng_state=False)
        if compile_blocks:  # an MoE block's expert batches have data-dependent sizes: a graph break, by design
            block = torch.compile(block, fullgraph=not routed)
        model.layers[name] = block
    blocks = list(model.layers.values())
    for index, block in enumerate(blocks):
        # the last block's parameters are needed right away by backward: no point resharding them after forward
        fully_shard(block, mesh=fsdp, mp_policy=policy, reshard_after_forward=index < len(blocks) - 1, offload_policy=placement)
    fully_shard(model, mesh=fsdp, mp_policy=policy, offload_policy=placement)
    return model
