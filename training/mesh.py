"""The one DeviceMesh of a run, built in one place: pp x dp_replicate x dp_shard x cp x tp, innermost fastest, so
tensor parallelism (the most communication-hungry split) lands on neighbouring ranks, which are a node's GPUs. With
expert parallelism dp_shard is built as efsdp x ep (the ep ranks of an expert group neighbours) and flattened back:
dense parameters shard over all of dp_shard, experts over ep and then FSDP over efsdp (torchtitan's layout)."""

from dataclasses import dataclass

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from training.config import Parallelism

DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


@dataclass
class Meshes:
    """The world mesh and the views of it each part of training uses."""

    layout: Parallelism
    world: DeviceMesh
    dp: DeviceMesh  # dp_replicate x dp_shard flattened: which slice of the global batch a rank reads
    fsdp: DeviceMesh  # what fully_shard shards (and, with dp_replicate > 1, replicates) over: 1-D FSDP or 2-D HSDP
    experts: DeviceMesh | None = None  # efsdp x ep, with expert parallelism: the experts' mesh

    @property
    def tp(self) -> DeviceMesh:
        return self.world["tp"]

    @property
    def pp(self) -> DeviceMesh:
        return self.world["pp"]

    @property
    def owns_loss(self) -> bool:
        """One rank per data-parallel slice counts the loss: the last pipeline stage's first tensor-parallel rank (the
        others compute the same loss, or none)."""
        return self.tp.get_local_rank() == 0 and self.pp.get_local_rank() == self.layout.pp - 1


def build(layout: Parallelism, device_type: str) -> Meshes:
    """`layout` resolved for the world size (dp_shard filled in)."""
    if layout.ep > 1:
        names = ("pp", "dp_replicate", "efsdp", "ep", "cp", "tp")
        sizes = (layout.pp, layout.dp_replicate, layout.dp_shard // layout.ep, layout.ep, layout.cp, layout.tp)
        world = init_device_mesh(device_type, sizes, mesh_dim_names=names)
        world["efsdp", "ep"]._flatten("dp_shard")
        experts = world["efsdp", "ep"]
    else:
        sizes = tuple(getattr(layout, name) for name in DIMS)
        world, experts = init_device_mesh(device_type, sizes, mesh_dim_names=DIMS), None
    dp = world["dp_replicate", "dp_shard"]._flatten("dp")
    fsdp = world["dp_replicate", "dp_shard"] if layout.dp_replicate > 1 else world["dp_shard"]
    return Meshes(layout, world, dp, fsdp, experts)


def by_device_mesh(params, of=lambda p: p) -> dict:
    """Parameters grouped by the device mesh of `of(p)` (None: a plain tensor): one foreach op or norm takes DTensors
    of one mesh only, and under expert parallelism the experts' mesh differs from the dense parameters'."""
    groups: dict = {}
    for p in params:
        groups.setdefault(getattr(of(p), "device_mesh", None), []).append(p)
    return groups
