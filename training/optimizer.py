"""The optimizer: AdamW for everything, or Muon for the blocks' matrices beside AdamW for the rest.

Muon (Jordan et al. 2024; Moonlight, Liu et al. 2025) orthogonalizes each matrix's momentum with a Newton-Schulz
iteration; torch.optim.Muon's `match_rms_adamw` scale (0.2 x sqrt(max(rows, cols))) gives its updates AdamW's RMS, so
the same lr, schedule and decoupled weight decay transfer. Embeddings, the output layer, norms, routers and
everything not a 2-D block matrix stay on AdamW, as Moonlight keeps them; an MoE layer's stacked experts are one
(experts, in, out) tensor and also stay on AdamW (torch's Muon takes 2-D matrices only).

Under FSDP2 a block matrix is a DTensor sharded by rows. Newton-Schulz on a row shard alone would orthogonalize each
shard apart (another update than one rank's); here the matmuls run on the DTensor, whose ops gather what each product
needs, so every layout gives one rank's update (tests/test_optimizer.py; the cost is in docs/benchmarks.md).
"""

import torch
from torch import nn

from training.mesh import by_device_mesh

MUON_SKIPPED = ("tok_embeddings", "output", "router")  # AdamW's, as Moonlight keeps them


class Optimizers:
    """Several optimizers stepped as one; torch.distributed.checkpoint saves and loads them as the iterable they are."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]):
        self.optimizers = optimizers

    def __iter__(self):
        return iter(self.optimizers)

    @property
    def param_groups(self) -> list[dict]:
        return [group for optimizer in self.optimizers for group in optimizer.param_groups]

    def step(self) -> None:
        for optimizer in self.optimizers:
            optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)


def uses_muon(name: str, param: nn.Parameter) -> bool:
    return param.dim() == 2 and not any(part in MUON_SKIPPED for part in name.split("."))


def build(model: nn.Module, kind: str, lr: float, weight_decay: float, betas: tuple[float, float], momentum: float = 0.95):
    """AdamW (decay on matrices, none on norms and biases), or Muon on the blocks' matrices plus that AdamW on the rest."""
    named = list(model.named_parameters())
    muon = [p for name, p in named if kind == "muon" and uses_muon(name, p)]
    taken = {id(p) for p in muon}
    rest = [p for _, p in named if id(p) not in taken]
    groups = []
    for on_mesh in by_device_mesh(rest).values():
        for decays in (True, False):
            params = [p for p in on_mesh if (p.dim() >= 2) == decays]
            if params:
                groups.append({"params": params, "weight_decay": weight_decay if decays else 0.0})
    adamw = torch.optim.AdamW(groups, lr=lr, betas=betas, foreach=True)
    if not muon:
        return adamw
    return Optimizers([torch.optim.Muon(muon, lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=True,
                                        adjust_lr_fn="match_rms_adamw"), adamw])  # fmt: skip
