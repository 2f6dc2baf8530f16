"""Causal attention: FlashAttention when it can run (installed, CUDA, bf16/fp16), else PyTorch SDPA. Chosen once."""

import logging

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)


def _flash_attn_func():
    try:
        from flash_attn import flash_attn_func  # FA2; FA3 ships as flash_attn_interface
    except ImportError:
        try:
            from flash_attn_interface import flash_attn_func
        except ImportError:
            return None
    return flash_attn_func


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q, k, v: (batch, seq, heads, head_dim); grouped-query k/v are repeated by SDPA's enable_gqa."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True)
    return out.transpose(1, 2)


def choose_attention(device: torch.device, dtype: torch.dtype):
    """Returns (name, fn) with fn(q, k, v) -> out, all (batch, seq, heads, head_dim)."""
    flash = _flash_attn_func()
    if flash is not None and device.type == "cuda" and dtype in (torch.bfloat16, torch.float16):
        name, fn = "flash_attn", lambda q, k, v: flash(q, k, v, causal=True)
    else:
        reason = "not installed" if flash is None else f"needs CUDA and bf16/fp16 (have {device.type}, {dtype})"
        name, fn = f"sdpa (flash_attn {reason})", _sdpa
    log.info("attention: %s", name)
    return name, fn
