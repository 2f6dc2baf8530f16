"""The mean of the weights over a run's last steps, which the run ends with (the tail average of stochastic weight
averaging; LAWA's latest-weight average, Kaddour 2022; Sanyal et al. 2023): the last steps' updates scatter the
weights around a point the mean sits nearer to, so a small run's final loss depends less on where its last steps
happened to land.

The mean is kept beside the weights, shard by shard (a DTensor's mean is a DTensor of the same placement), updated
after each optimizer step of the window as a running mean, saved in each checkpoint taken inside the window and
restored with it, so a resumed run ends with the same mean as an uninterrupted one.
"""

import torch


class TailAverage:
    """The running mean of every parameter over the steps after `first_step` (steps first_step+1 .. the last)."""

    def __init__(self, model: torch.nn.Module, total_steps: int, fraction: float):
        self.first_step = total_steps - max(1, round(fraction * total_steps))
        self.params = {name: param for name, param in model.named_parameters()}
        self.means = {name: torch.zeros_like(param.detach()) for name, param in self.params.items()}

    def count_at(self, step: int) -> int:
        """Steps averaged once `step` steps are done (what a checkpoint of that step holds)."""
        return max(0, step - self.first_step)

    @torch.no_grad()
    def update(self, done: int) -> None:
        """Fold the weights after step `done` into the mean, if the step is in the window."""
        count = self.count_at(done)
        for name, mean in self.means.items() if count else ():
            if count == 1:  # the window's first step, also after a rewind to before it: no stale mean carried
                mean.copy_(self.params[name].detach())
            else:
                mean.lerp_(self.params[name].detach(), 1.0 / count)

    def state(self, step: int) -> dict[str, torch.Tensor] | None:
        """What a checkpoint of `step` saves and loads beside model and optimizer: the means once the window began."""
        return self.means if self.count_at(step) else None

    @torch.no_grad()
    def apply(self) -> None:
        """Set the weights to their mean: the run's last evaluation and checkpoint score and keep the average."""
        for name, mean in self.means.items():
            self.params[name].copy_(mean)
