"""FP8 (training/fp8.py): refused in one line where it cannot run, and torchtitan's choice of layers to convert."""

import pytest
import torch
import torch.nn as nn

from training import fp8
from training.config import load_config
from training.model import MODEL_CONFIGS, ModelConfig, Transformer


@pytest.mark.parametrize("recipe", ["rowwise", "tensorwise"])
def test_fp8_is_refused_on_a_cpu_in_one_line_and_leaves_the_model_as_it_was(recipe):
    model = Transformer(MODEL_CONFIGS["tiny"])
    with pytest.raises(ValueError, match=f"fp8 {recipe} needs a CUDA GPU with FP8 tensor cores") as refused:
        fp8.convert(model, recipe, torch.device("cpu"))
    assert "\n" not in str(refused.value)
    assert {type(m) for m in model.modules() if "Linear" in type(m).__name__} == {nn.Linear}
    fp8.convert(model, "off", torch.device("cpu"))  # off runs anywhere and changes nothing


def test_the_output_projection_and_layers_with_dims_off_16_stay_in_high_precision():
    tiny = Transformer(MODEL_CONFIGS["tiny"])
    linears = {name for name, m in tiny.named_modules() if isinstance(m, nn.Linear)}
    assert {name for name in linears if fp8.eligible(tiny.get_submodule(name), name)} == linears - {"output"}
    odd_ffn = Transformer(ModelConfig(dim=256, n_layers=1, n_heads=4, n_kv_heads=2, ffn_hidden=100))
    assert not fp8.eligible(odd_ffn.layers["0"].feed_forward.w1, "layers.0.feed_forward.w1")
    assert fp8.eligible(odd_ffn.layers["0"].attention.wq, "layers.0.attention.wq")


def test_the_config_takes_the_three_recipes_only():
    assert load_config("tiny", fp8="rowwise").fp8 == "rowwise" and load_config("tiny").fp8 == "off"
    with pytest.raises(ValueError, match="fp8"):
        load_config("tiny", fp8="mxfp8")
