"""The mixture-of-experts model, Muon and CPU offload through the real `train` CLI under torchrun with gloo: expert
parallelism (alone and under FSDP) trains one rank's losses and expert loads, a checkpoint moves between EP and one
rank, Muon under FSDP2 takes one rank's steps, offloading changes nothing but where the state lives."""

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run
from training import metrics
from training.export import find_checkpoint, load_model
from training.parallelize import GRAD_NORM_PARITY_RTOL, LOSS_PARITY_RTOL

pytestmark = pytest.mark.slow
STEPS = 6
SETTINGS = ("seq_len: 32\nglobal_batch: 8\nmicro_batch: 2\nwarmup: 2\ndtype: fp32\nlog_every: 1\nkeep_checkpoints: 10\n"
            "checkpoint_every: 3\neval_every: 3\nlr: 3.0e-4\nmin_lr: 3.0e-5\n")  # fmt: skip
# Muon orthogonalizes in bfloat16 (torch.optim.Muon's Newton-Schulz): under FSDP2 the DTensor matmuls sum in another
# order, which bf16 rounds ~1e-3 apart per update element, and the loss a few steps on 3e-5 apart (seen 2.6e-5). A
# Newton-Schulz step taken on each rank's row shard alone (a wrong layout) moves the first Muon step's loss by far
# more: tests/test_optimizer.py measures both.
MUON_PARITY_RTOL = 2e-4


@pytest.fixture(scope="module")
def train(workdir):
    (workdir / "moe.yaml").write_text(SETTINGS + "model: tiny-moe\n")
    (workdir / "dense.yaml").write_text(SETTINGS)
    (workdir / "moe-bias.yaml").write_text(SETTINGS + "model: tiny-moe\nmodel_overrides: {moe_bias_balancing: true}\n")
    done: set[str] = set()

    def launch(out: str, config: str, *flags: str) -> Path:
        if out not in done:
            run("training", "--mixture", "two.yaml", "--config", config, "--steps", str(STEPS), "--out", out, *flags, cwd=workdir)
            done.add(out)
        return workdir / out

    return launch


def records(out: Path):
    return metrics.load(str(out)).drop_duplicates("step", keep="last").set_index("step")


def worst_relative(ours, theirs) -> float:
    return max(abs(ours[s] - theirs[s]) / abs(theirs[s]) for s in theirs.index)


def expert_loads(out: Path) -> list[dict]:
    return [json.loads(line)["moe"]["tokens_per_expert"] for line in (out / "metrics.jsonl").read_text().splitlines()]


# EP 2 dispatches over two ranks; FSDP 2 x EP 2 also shards the experts over efsdp and the dense layers over all
# four ranks, which covers FSDP of a MoE model without EP too (the same fully_shard of the dense layers)
LAYOUTS = {"EP 2": ["--dp-shard", "2", "--ep", "2"], "FSDP 2 x EP 2": ["--dp-shard", "4", "--ep", "2"]}


def folder(layout: str) -> str:
    return "moe-" + layout.replace(" ", "")


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_moe_layouts_train_the_single_rank_losses_and_expert_loads(train, layout):
    single, ours = train("moe-single", "moe.yaml", "--ranks", "1"), train(folder(layout), "moe.yaml", *LAYOUTS[layout])
    worst = worst_relative(records(ours).loss, records(single).loss)
    print(f"\n{layout}: max relative loss difference over {STEPS} steps = {worst:.1e}")
    assert worst < LOSS_PARITY_RTOL
    assert worst_relative(records(ours).val_loss.dropna(), records(single).val_loss.dropna()) < LOSS_PARITY_RTOL
    # Adam's update hides a gradient scaled by a constant (the loss would match with experts' gradients halved); the
    # norm does not. A gradient's norm sums cancelling terms: another summation order moves it more than the loss
    assert worst_relative(records(ours).grad_norm, records(single).grad_norm) < GRAD_NORM_PARITY_RTOL
    # the same tokens reach the same experts: a score tie within float error could flip one token's choice, no more
    for theirs, mine in zip(expert_loads(single), expert_loads(ours)):
        assert theirs.keys() == mine.keys() == {"0", "1", "2", "3"}
        assert all(sum(abs(a - b) for a, b in zip(theirs[k], mine[k])) <= 2 for k in theirs)
        assert all(sum(mine[k]) == 8 * 32 * 2 for k in mine)  # each token's top 2, counted once over all ranks


def test_an_expert_parallel_checkpoint_resumes_on_one_rank(train, workdir):
    """EP 2 writes step 3; one rank resumes it (DCP gathers the experts' shards) and trains the uninterrupted losses."""
    single, sharded = train("moe-single", "moe.yaml", "--ranks", "1"), train(folder("EP 2"), "moe.yaml", *LAYOUTS["EP 2"])
    name = "step-00000003"
    shutil.copytree(sharded / "checkpoints" / name, workdir / "moe-resumed" / "checkpoints" / name)
    resumed = train("moe-resumed", "moe.yaml", "--resume", "--ranks", "1")
    losses = records(resumed).loss
    assert list(losses.index) == [4, 5, 6]
    assert worst_relative(losses, records(single).loss[losses.index]) < LOSS_PARITY_RTOL


def test_bias_balancing_moves_the_saved_expert_bias_and_logs_the_balancing_losses(train):
    out = train("moe-bias", "moe-bias.yaml", "--dp-shard", "2")
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["moe"]
    assert last["balance_loss"] >= 1.0 - 1e-6  # Switch's loss is at least 1, 1 exactly when balanced
    assert set(last["max_over_mean_load"]) == set(last["busiest_share"]) == {"0", "1", "2", "3"}
    model = load_model(*find_checkpoint(out))
    for layer in model.layers.values():  # 6 sign steps of 1e-3: every expert's bias moved, by a multiple of 1e-3
        bias = layer.feed_forward.expert_bias
        assert bool((bias != 0).any()) and float((bias / 1e-3 - (bias / 1e-3).round()).abs().max()) < 1e-3


def test_muon_under_fsdp_takes_the_single_rank_steps(train):
    single = train("muon-single", "dense.yaml", "--ranks", "1", "--optimizer", "muon")
    sharded = train("muon-fsdp", "dense.yaml", "--dp-shard", "2", "--optimizer", "muon")
    adamw = train("adamw-single", "dense.yaml", "--ranks", "1")
    worst = worst_relative(records(sharded).loss, records(single).loss)
    print(f"\nMuon, FSDP 2 vs one rank: max relative loss difference {worst:.1e}")
    assert worst < MUON_PARITY_RTOL
    assert records(single).loss[2] != records(adamw).loss[2]  # Muon's first update is not AdamW's


def test_offloaded_state_trains_the_same_losses(train):
    plain = train("adamw-single", "dense.yaml", "--ranks", "1")
    offloaded = train("offload-fsdp", "dense.yaml", "--dp-shard", "2", "--offload")
    assert worst_relative(records(offloaded).loss, records(plain).loss) < LOSS_PARITY_RTOL
