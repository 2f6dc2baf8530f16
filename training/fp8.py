"""FP8 training through torchao's float8 (torchtitan's converter): the blocks' Linear layers compute their matmuls in
float8 with dynamic scales, per tensor ("tensorwise", the fastest) or per row ("rowwise", the more accurate); the
master weights, the optimizer and everything else stay as they were. Needs FP8 tensor cores (compute capability 8.9+:
H100/H200, L4, RTX 4090) and torchao; anywhere else `check` refuses in one line, before any rank starts."""

import importlib.util

import torch
import torch.nn as nn

RECIPES = ("off", "tensorwise", "rowwise")
FP8_CAPABILITY = (8, 9)


def check(recipe: str, device: torch.device) -> None:
    """ValueError with one line when `recipe` cannot run on `device`."""
    if recipe == "off":
        return
    if recipe not in RECIPES:
        raise ValueError(f"fp8 {recipe!r} is not one of {RECIPES}")
    if device.type != "cuda":
        raise ValueError(f"fp8 {recipe} needs a CUDA GPU with FP8 tensor cores (compute capability 8.9+: H100/H200, L4); "
                         f"this device is {device.type}: train with --fp8 off")  # fmt: skip
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_CAPABILITY:
        raise ValueError(f"fp8 {recipe} needs compute capability 8.9+ (H100/H200, L4); {torch.cuda.get_device_name(device)} "
                         f"is {capability[0]}.{capability[1]}: train with --fp8 off")  # fmt: skip
    if importlib.util.find_spec("torchao") is None:
        raise ValueError(f"fp8 {recipe} needs torchao (pip install torchao; offline: carry its wheel, see benchmarks/README.md)")


def eligible(module: nn.Module, name: str) -> bool:
    """torchtitan's filter: not the output projection (the logits stay in high precision), and only Linear layers
    whose dims float8 matmuls take (multiples of 16)."""
    if name == "output":
        return False
    return not isinstance(module, nn.Linear) or (module.in_features % 16 == 0 and module.out_features % 16 == 0)


def convert(model: nn.Module, recipe: str, device: torch.device) -> None:
    """Swap the model's eligible Linear layers for torchao's Float8Linear (before parallelize, as torchtitan does)."""
    check(recipe, device)
    if recipe == "off":
        return
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    convert_to_float8_training(model, module_filter_fn=eligible, config=Float8LinearConfig.from_recipe_name(recipe))
