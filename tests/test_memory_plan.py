"""The memory planner against hand-computed bytes (Llama 2 7B and 70B shapes), its layouts and its choice, and the CLI."""

import subprocess
import sys

import pytest
import torch

from training.memory_plan import GiB, HEADROOM, Layout, choose, estimate, layouts, num_params
from training.model import MODEL_CONFIGS, ModelConfig, Transformer

SEVEN_B = 2 * 32000 * 4096 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096) + 4096


def test_seven_b_has_llama_2s_6_74b_parameters_and_the_count_matches_the_model():
    assert num_params(MODEL_CONFIGS["7b"]) == SEVEN_B == 6_738_415_616
    for name in MODEL_CONFIGS:
        with torch.device("meta"):
            assert num_params(MODEL_CONFIGS[name]) == Transformer(MODEL_CONFIGS[name]).num_params(), name


def test_seven_b_on_8_gpus_fsdp_holds_16_bytes_per_parameter_over_8_and_korthikantis_activations():
    seven_b = estimate(MODEL_CONFIGS["7b"], Layout(1, 8, 1, 1), seq_len=4096, micro_batch=1)
    assert seven_b.params + seven_b.grads + seven_b.optimizer == 16 * SEVEN_B / 8
    sbh, block = 4096 * 1 * 4096, 4096 * 1 * 4096 * 34
    outside = 4 * sbh + 16 * 4096 * 32000  # final norm + output inputs, the loss's fp32 logits and gradients
    assert seven_b.activations == 32 * block + outside
    assert seven_b.activations_ac == 32 * 2 * sbh + block + outside
    root_and_two_blocks = 2 * 32000 * 4096 + 4096 + 2 * (4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096)
    assert seven_b.gathered == 2 * root_and_two_blocks
    scores = estimate(MODEL_CONFIGS["7b"], Layout(1, 8, 1, 1), seq_len=4096, micro_batch=1, scores_stored=True)
    assert scores.activations - seven_b.activations == 32 * sbh * 5 * 32 * 4096 / 4096
    fp32 = estimate(MODEL_CONFIGS["7b"], Layout(1, 8, 1, 1), seq_len=4096, micro_batch=1, param_bytes=4)
    assert fp32.params + fp32.grads + fp32.optimizer == 16 * SEVEN_B / 8 and fp32.activations == 2 * (32 * block + 4 * sbh) + 16 * 4096 * 32000


def test_tp_divides_the_matmuls_and_embeddings_not_the_norms_and_pp_puts_the_fullest_stage_first():
    config = MODEL_CONFIGS["70b"]
    matmuls = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672
    tp8 = estimate(config, Layout(1, 1, 8, 1), seq_len=4096, micro_batch=1)
    assert tp8.params == 4 * (80 * (matmuls / 8 + 2 * 8192) + 2 * 32000 * 8192 / 8 + 8192)
    assert tp8.activations == 80 * 4096 * 8192 * 34 / 8 + 4 * 4096 * 8192 / 8 + 16 * 4096 * 32000  # logits whole
    pp2 = estimate(config, Layout(1, 4, 1, 2), seq_len=4096, micro_batch=1)  # 1F1B: stage 0 holds 2 micro-batches of 40 blocks
    assert pp2.params == 4 * (40 * (matmuls + 2 * 8192) + 32000 * 8192) / 4
    assert pp2.activations == 2 * 40 * 4096 * 8192 * 34


def test_layouts_keep_tp_inside_a_node_dividing_the_heads_pp_dividing_the_blocks_and_replicas_of_whole_nodes():
    found = layouts(MODEL_CONFIGS["70b"], gpus=16, gpus_per_node=8)
    assert all(x.dp_replicate * x.dp_shard * x.tp * x.pp == 16 and x.ep == 1 for x in found)
    assert {x.tp for x in found} == {1, 2, 4, 8} and {x.pp for x in found} == {1, 2, 4, 8, 16}
    assert {x.dp_replicate for x in found} == {1, 2}  # 2 nodes: a replica per node at most
    assert Layout(1, 16, 1, 1) in found and Layout(2, 8, 1, 1) in found and Layout(2, 1, 8, 1) in found
    two_kv_heads = ModelConfig(dim=256, n_layers=6, n_heads=4, n_kv_heads=2)
    assert {x.tp for x in layouts(two_kv_heads, 8, 8)} == {1, 2} and {x.pp for x in layouts(two_kv_heads, 8, 8)} == {1, 2}


def test_the_choice_prefers_data_parallelism_then_tp_inside_a_node_and_says_when_nothing_fits():
    def plan(model, gpus, memory):
        config = MODEL_CONFIGS[model]
        estimates = [estimate(config, layout, 4096 if model != "1b" else 2048, 1 if model != "1b" else 4)
                     for layout in layouts(config, gpus, 8)]  # fmt: skip
        return choose(estimates, memory * GiB * (1 - HEADROOM))

    best, checkpointing, reason = plan("7b", 8, 80)
    assert best.layout == Layout(1, 8, 1, 1) and not checkpointing and "no TP or PP" in reason
    best, checkpointing, reason = plan("70b", 64, 80)  # 16 bytes x 69B / 32 = 34 GiB: HSDP over 2 nodes with AC
    assert best.layout == Layout(2, 32, 1, 1) and checkpointing and "HSDP" in reason
    # 1b's 4 x 2048 tokens with AC: 26.7 GiB with FSDP 2, 25.8 with TP 2 (the logits, 16 bytes x 128,256 vocab, stay whole)
    best, checkpointing, reason = plan("1b", 2, 29)  # 26.1 GiB usable
    assert best.layout == Layout(1, 1, 2, 1) and checkpointing and "TP 2 inside a node" in reason
    assert plan("1b", 2, 24) is None
    assert plan("70b", 8, 80) is None  # 16 bytes x 68.98B / 8 GPUs = 128.5 GiB each, before activations


def test_a_mixture_of_experts_counts_every_expert_in_its_state_and_expert_parallelism_shrinks_what_a_block_gathers():
    """OLMoE-1B-7B's shapes: 6.92B parameters of which 1.28B active; the training state divides by dp_shard with or
    without EP (experts shard over efsdp x ep); a block's gathered copy holds num_experts / ep experts."""
    config = MODEL_CONFIGS["moe-7b-a1b"]
    total, experts = num_params(config), 16 * 3 * 2048 * 1024 * 64
    with torch.device("meta"):
        model = Transformer(config)
    assert total == model.num_params() and round(total / 1e9, 2) == 6.92 and round(model.num_params(active=True) / 1e9, 2) == 1.28
    found = layouts(config, 8, 8)
    assert {x.ep for x in found} == {1, 2, 4, 8} and all((x.dp_shard, x.tp, x.pp) == (8, 1, 1) for x in found)
    plain, ep8 = estimate(config, Layout(1, 8, 1, 1), 4096, 2), estimate(config, Layout(1, 8, 1, 1, 8), 4096, 2)
    assert plain.state() == ep8.state() == 16 * total / 8
    assert plain.gathered - ep8.gathered == 2 * 2 * (experts / 16) * (1 - 1 / 8)  # two blocks' experts, bf16
    best, _, reason = choose([plain, ep8], 72 * GiB)
    assert best.layout.ep == 8 and "experts split 8 ways" in reason


def test_offload_leaves_the_gpu_the_buffers_and_activations():
    seven_b = estimate(MODEL_CONFIGS["7b"], Layout(1, 1, 1, 1), seq_len=4096, micro_batch=1)
    assert seven_b.total(True, offload=True) == seven_b.gathered + seven_b.activations_ac
    assert choose([seven_b], 72 * GiB) is None and choose([seven_b], 72 * GiB, offload=True)[0] is seven_b


@pytest.mark.parametrize(
    "args, code, expected",
    [
        (["--model", "7b", "--gpus", "8", "--gpu-memory", "80"], 0, "chosen: dp_shard 8 (32.8 GiB per GPU; train --dp-shard 8)"),
        (["--model", "70b", "--gpus", "8", "--gpu-memory", "80"], 1, "train plan: no layout of 70b fits 8 GPUs of 80 GiB"),
        (["--model", "7b"], 2, "train plan: give --mixture (the data plan) or --gpus (the memory plan)"),
        (["--model", "moe-7b-a1b", "--gpus", "8"], 0, "chosen: dp_shard 8 x ep 8 (43.5 GiB per GPU; train --dp-shard 8 --ep 8)"),
        (["--model", "7b", "--gpus", "1", "--offload"], 0, "chosen: one GPU (20.3 GiB per GPU; train --offload)"),
    ],
)
def test_train_plan_gpus_prints_each_layout_and_the_choice_or_one_line(args, code, expected):
    done = subprocess.run([sys.executable, "-m", "training", "plan", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == code and expected in done.stdout + done.stderr, done.stdout + done.stderr
    if code:
        assert len(done.stderr.strip().splitlines()) == 1
    if code != 2 and "8" in args:
        assert ("dp_shard 4 x tp 2" if "moe" not in args[1] else "dp_shard 8 x ep 2") in done.stdout and "total AC" in done.stdout
    if code == 0:  # the choice and its reason on one line
        assert any(line.startswith(expected) and line.endswith("no activation recomputation") for line in done.stdout.splitlines())


@pytest.mark.parametrize(
    "args, advice",
    [
        (["--model", "7b", "--gpus", "1"], "alone take 101.7 GiB per GPU (no shorter --seq-len or smaller --micro-batch helps): "
                                           "shard them with FSDP over more GPUs (2 such GPUs fit), or train a smaller model"),
        (["--model", "7b", "--gpus", "1", "--gpu-memory", "40"], "shard them with FSDP over more GPUs (4 such GPUs fit)"),
        (["--model", "1b", "--gpus", "2", "--gpu-memory", "24"], "(tp 2, AC): more GPUs, a shorter --seq-len or a smaller --micro-batch"),
    ],
)
def test_a_plan_that_does_not_fit_advises_what_would_help(args, advice):
    """When the weights, gradients and AdamW states alone are over the GPU on every layout (7B on one GPU: 16 bytes x
    6.74B), sequences and micro-batches cannot help: the line says to shard over more GPUs, as many as fit, or a
    smaller model; only when activations are what is over does it advise a shorter --seq-len or micro-batch."""
    done = subprocess.run([sys.executable, "-m", "training", "plan", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"train plan: no layout of {args[1]} fits ") and advice in done.stderr, done.stderr
