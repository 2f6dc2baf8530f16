"""Learning-rate schedules as pure functions of the step, so the checkpoint only needs the step."""

import math


def lr_at(step: int, *, peak: float, min_lr: float, warmup: int, total: int, kind: str = "cosine", decay_frac: float = 0.2) -> float:
    """Linear warmup, then cosine to min_lr, or WSD: constant, then linear decay over the last decay_frac."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if kind == "constant":
        return peak
    if kind == "cosine":
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress))
    if kind == "wsd":
        decay_start = total - int(decay_frac * total)
        if step < decay_start:
            return peak
        progress = min(1.0, (step - decay_start) / max(1, total - decay_start))
        return peak + (min_lr - peak) * progress
    raise ValueError(f"unknown schedule {kind!r}: cosine, wsd or constant")
