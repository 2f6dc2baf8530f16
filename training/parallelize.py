"""Apply activation checkpointing -> torch.compile -> FSDP2, in that order (torchtitan's parallelize, on one screen)."""

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from training.model import Transformer


def parallelize(model: Transformer, mesh: DeviceMesh, param_dtype: torch.dtype, activation_checkpointing: bool,
                compile_blocks: bool) -> Transformer:  # fmt: skip
    for index, block in enumerate(model.layers):
        if activation_checkpointing:
            block = checkpoint_wrapper(block, preserve_rng_state=False)
        if compile_blocks:
            block = torch.compile(block, fullgraph=True)
        model.layers[index] = block
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for index, block in enumerate(model.layers):
        # the last block's parameters are needed right away by backward: no point resharding them after forward
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=index < len(model.layers) - 1)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model
