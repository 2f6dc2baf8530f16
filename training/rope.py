"""Rotary position tables, plain or scaled for context extension: position interpolation (`linear`) and YaRN.

The formulas are Hugging Face's (`modeling_rope_utils`), so a model extended here and exported as Llama with
`rope_scaling` computes the same angles in transformers, vLLM and lm-evaluation-harness.
"""

import math

import torch


def inverse_frequencies(head_dim: int, theta: float, scaling: dict | None) -> tuple[torch.Tensor, float]:
    """(inverse frequency of each rotated pair, attention factor applied to cos and sin).

    `scaling`: None, {"kind": "linear", "factor": f}, or {"kind": "yarn", "factor": f, "original_seq_len": n,
    "beta_fast": 32, "beta_slow": 1}."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
    plain = 1.0 / theta**exponents
    if scaling is None:
        return plain, 1.0
    factor = float(scaling["factor"])
    if scaling["kind"] == "linear":
        return plain / factor, 1.0
    # YaRN: high-frequency pairs (many rotations over the original length) keep their frequency, low-frequency pairs
    # are interpolated by `factor`, with a linear ramp between; attention is sharpened by 0.1 ln(factor) + 1
    def pair_index(rotations: float) -> float:
        return head_dim * math.log(scaling["original_seq_len"] / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(pair_index(scaling.get("beta_fast", 32))), 0)
    high = min(math.ceil(pair_index(scaling.get("beta_slow", 1))), head_dim - 1)
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / max(high - low, 0.001)).clamp(0, 1)
    keep = 1 - ramp
    mixed = plain / factor * (1 - keep) + plain * keep
    return mixed, 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def rope_tables(head_dim: int, max_seq_len: int, theta: float, scaling: dict | None, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position's angles, (max_seq_len, head_dim / 2), attention factor included."""
    inv_freq, attention_factor = inverse_frequencies(head_dim, theta, scaling)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv_freq).to(device)
    return angles.cos() * attention_factor, angles.sin() * attention_factor


def hf_rope_scaling(scaling: dict | None) -> dict | None:
    """Our scaling as config.json's `rope_scaling` (read by transformers 4 and 5)."""
    if scaling is None:
        return None
    if scaling["kind"] == "linear":
        return {"rope_type": "linear", "factor": float(scaling["factor"])}
    return {"rope_type": "yarn", "factor": float(scaling["factor"]), "original_max_position_embeddings": scaling["original_seq_len"],
            "beta_fast": scaling.get("beta_fast", 32), "beta_slow": scaling.get("beta_slow", 1)}  # fmt: skip
