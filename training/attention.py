"""Causal attention, chosen once and named in the log: the flash-attn package (FA2/FA3) when it can run, or PyTorch's
SDPA with its backend named. SDPA's `flash` and `cudnn` backends are FlashAttention kernels inside PyTorch, so a GPU
run has FlashAttention without the flash-attn package (which builds only with CUDA and --no-build-isolation)."""

import logging

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

# SDPA backends by name: each is switched on alone, process-wide (compiled blocks see the same flags)
SDPA_BACKENDS = {
    "flash": "enable_flash_sdp",
    "cudnn": "enable_cudnn_sdp",
    "efficient": "enable_mem_efficient_sdp",
    "math": "enable_math_sdp",
}
KERNELS = ("auto", "flash_attn", "sdpa", *(f"sdpa-{name}" for name in SDPA_BACKENDS))


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


def _only_sdpa_backend(name: str) -> None:
    for backend, switch in SDPA_BACKENDS.items():
        getattr(torch.backends.cuda, switch)(backend == name)


def choose_attention(device: torch.device, dtype: torch.dtype, kernel: str = "auto"):
    """Returns (name, fn) with fn(q, k, v) -> out, all (batch, seq, heads, head_dim). `kernel` is one of KERNELS:
    auto takes flash-attn when it can run, else SDPA with PyTorch's own choice of backend."""
    if kernel not in KERNELS:
        raise ValueError(f"attention {kernel!r} is not one of {KERNELS}")
    flash = _flash_attn_func()
    usable = flash is not None and device.type == "cuda" and dtype in (torch.bfloat16, torch.float16)
    if kernel == "flash_attn" and not usable:
        why = "not installed" if flash is None else f"needs CUDA and bf16/fp16 (have {device.type}, {dtype})"
        raise ValueError(f"attention flash_attn: the flash-attn package {why}; sdpa-flash is PyTorch's FlashAttention")
    if kernel in ("flash_attn", "auto") and usable:
        name, fn = "flash_attn", lambda q, k, v: flash(q, k, v, causal=True)
    elif kernel.startswith("sdpa-"):
        backend = kernel.removeprefix("sdpa-")
        if device.type != "cuda":
            raise ValueError(f"attention {kernel}: SDPA backends are chosen on CUDA; on {device.type} use sdpa or auto")
        _only_sdpa_backend(backend)
        name, fn = kernel, _sdpa
    else:
        reason = "" if kernel == "sdpa" else " (flash-attn not installed)" if flash is None else f" (flash-attn needs CUDA and bf16/fp16, have {device.type}, {dtype})"
        name, fn = f"sdpa, PyTorch's choice of backend{reason}", _sdpa
    log.info("attention: %s", name)
    return name, fn
