"""Pipeline parallelism: the model cut into `pp` stages of consecutive layers, one per rank of a pipeline group, the
step run by torch.distributed.pipelining's 1F1B or GPipe schedule. Evaluation is a plain forward hand-off (send and
receive) from stage to stage: no backward, and any batch shape."""

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from training.config import Parallelism
from training.mesh import Meshes
from training.mixture import PhaseShape
from training.model import Transformer

SCHEDULES = {"1F1B": Schedule1F1B, "GPipe": ScheduleGPipe}


def stage_layers(n_layers: int, stages: int, stage: int) -> range:
    """The layers a stage keeps: an even split, the first stages taking one more when it does not divide."""
    base, extra = divmod(n_layers, stages)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (stage < extra))


def microbatches(layout: Parallelism, shape: PhaseShape) -> int:
    """Micro-batches a pipeline step is cut into: pp_microbatches, or the step's micro-batches per data-parallel rank;
    ValueError when they do not split a data-parallel rank's sequences evenly."""
    sequences = shape.global_batch // layout.dp
    count = layout.pp_microbatches or sequences // shape.micro_batch
    if count < 1 or sequences % count:
        raise ValueError(f"parallelism.pp_microbatches {count} does not split the {sequences} sequences a data-parallel "
                         f"rank takes per step (global_batch {shape.global_batch} / dp {layout.dp})")  # fmt: skip
    return count


def split(model: Transformer, stage: int, stages: int) -> Transformer:
    """Keep this stage's layers (by their index, so parameter names stay the whole model's); the embedding stays on
    the first stage, the final norm and output on the last."""
    keep = stage_layers(len(model.layers), stages, stage)
    for name in list(model.layers):
        if int(name) not in keep:
            del model.layers[name]
    if stage > 0:
        model.tok_embeddings = None
    if stage < stages - 1:
        model.norm, model.output = None, None
    return model


class Pipeline:
    """This rank's stage and the schedules that run it, one per batch shape (a schedule learns its shapes once)."""

    def __init__(self, model: Transformer, meshes: Meshes, device: torch.device, hidden_dtype: torch.dtype,
                 loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):  # fmt: skip
        self.model, self.meshes, self.device, self.hidden_dtype, self.loss_fn = model, meshes, device, hidden_dtype, loss_fn
        self.group = meshes.pp.get_group()
        self.stage, self.stages = meshes.pp.get_local_rank(), meshes.layout.pp
        self._schedules: dict[tuple, object] = {}

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.stages - 1

    def step(self, inputs: torch.Tensor, targets: torch.Tensor, count: int) -> None:
        """Forward and backward of a data-parallel rank's whole step, cut into `count` micro-batches; the loss function
        sees each micro-batch's logits on the last stage, in order (after one call on placeholder tensors when a
        schedule first runs: it learns the shapes so); gradients are the micro-batches' mean."""
        key = (tuple(inputs.shape), count)
        if key not in self._schedules:
            stage = PipelineStage(self.model, self.stage, self.stages, self.device, group=self.group)
            self._schedules[key] = SCHEDULES[self.meshes.layout.pp_schedule](stage, count, loss_fn=self.loss_fn)
        schedule = self._schedules[key]
        if self.first:
            schedule.step(inputs.to(self.device))
        elif self.last:
            schedule.step(target=targets.to(self.device))
        else:
            schedule.step()

    def _hidden(self, rows: int, length: int) -> torch.Tensor:
        """An empty tensor shaped as the hidden states a stage hands on (with sequence parallelism, this rank's slice
        of the sequence)."""
        return torch.empty(rows, length // self.meshes.layout.tp, self.model.config.dim, dtype=self.hidden_dtype, device=self.device)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor | None:
        """Logits on the last stage (None elsewhere), handing hidden states on from stage to stage."""
        if self.first:
            hidden = self.model(inputs.to(self.device))
        else:
            hidden = self._hidden(*inputs.shape)
            dist.recv(hidden, src=dist.get_global_rank(self.group, self.stage - 1))
            hidden = self.model(hidden)
        if self.last:
            return hidden
        dist.send(hidden.contiguous(), dst=dist.get_global_rank(self.group, self.stage + 1))
        return None
