"""The batch-size ramp (a mixture's `batch_ramp`): its stages by tokens, the loader drawing each step's ramped batch
(resumable inside the ramp on any rank count, refusing a resume under another ramp), phases and token accounting
that count the ramp's smaller steps, and a resume inside the ramp through the real `train` CLI that trains the
uninterrupted losses."""

import shutil

import pytest

from tests.conftest import run
from training import metrics
from training.data import MixtureLoader, check_batches
from training.mixture import BatchRamp, Mixture, PhaseShape
from training.parallelize import LOSS_PARITY_RTOL

BASE = PhaseShape(seq_len=32, global_batch=16, micro_batch=2, rope_theta=10000.0)


def ramped(workdir, **phases) -> Mixture:
    return Mixture.model_validate({
        "name": "ramped", "batch_ramp": {"start": 0.25, "tokens": 2048},
        "sources": {"web": {"paths": [str(workdir / "curated/tokens/part-0000[0-2].parquet")]},
                    "more": {"paths": [str(workdir / "curated/tokens/part-00003.parquet")]}},
        **phases,
    })  # fmt: skip


def test_the_ramp_splits_its_tokens_over_the_smaller_batches_by_doublings():
    # 1,024 tokens at 4 x 32 a step: 8 steps; 1,024 at 8 x 32: 4 steps; then the full 16
    assert BatchRamp(start=0.25, tokens=2048).stages(BASE) == [(0, 4), (8, 2), (12, 1)]
    assert BatchRamp(start=0.5, tokens=1000).stages(BASE) == [(0, 2), (4, 1)]  # 1,000 tokens: whole steps of 256
    with pytest.raises(ValueError, match="is not 1/2, 1/4, 1/8"):
        BatchRamp(start=0.3, tokens=100)


def test_the_loader_draws_the_ramped_batches_and_resumes_mid_ramp_on_any_rank_count(workdir):
    mixture = ramped(workdir)
    loader = MixtureLoader(mixture, 32, 16, 2, 0, 1, 0, 0, total_steps=20)
    plans = [loader.plan_step() for _ in range(20)]
    assert [len(plan) for plan in plans] == [4] * 8 + [8] * 4 + [16] * 8
    assert sum(loader.tokens_per_source().values()) == 32 * (32 + 32 + 128)
    halfway = MixtureLoader(mixture, 32, 16, 2, 0, 1, 0, 0, total_steps=20)
    for _ in range(5):
        halfway.plan_step()
    for world, rank in ((1, 0), (2, 1)):  # the global plan does not depend on the ranks; each takes its slice
        resumed = MixtureLoader(mixture, 32, 16, 2, rank, world, 0, 0, total_steps=20)
        resumed.load_state_dict(halfway.state_dict())
        assert resumed.grad_accum == 4 // (2 * world)
        assert [resumed.plan_step() for _ in range(15)] == plans[5:]
    unramped = MixtureLoader(Mixture.model_validate(mixture.model_dump() | {"batch_ramp": None}), 32, 16, 2, 0, 1, 0, 0, total_steps=20)
    with pytest.raises(ValueError, match=r"trained with the batch ramp's stages \(first step, divisor\) \[\[0, 4\], \[8, 2\], \[12, 1\]\], not \[\[0, 1\]\]"):
        unramped.load_state_dict(halfway.state_dict())


def test_phases_count_the_ramps_smaller_steps_and_a_batch_the_ranks_cannot_split_is_refused(workdir):
    mixture = ramped(workdir, phases=[{"name": "a", "fraction": 0.5, "weights": {"web": 1.0}}, {"name": "b", "weights": {"more": 1.0}}])
    # 20 nominal steps of 512 tokens: phase b begins once 5,120 are trained (8 x 128 + 4 x 256 + 6 x 512 = 5,120)
    assert mixture.phase_start_steps(20, BASE) == [0, 18]
    assert mixture.scheduled_phase_tokens(20, BASE) == [5120, 2 * 512]
    check_batches(mixture, BASE, 2)
    with pytest.raises(ValueError, match="batch_ramp: a batch of 1/4 of global_batch 16 is not a whole multiple of micro_batch 2 x ranks 4"):
        check_batches(mixture, BASE, 4)


@pytest.mark.slow
def test_a_run_resumed_in_the_middle_of_the_ramp_trains_the_uninterrupted_losses(workdir):
    (workdir / "ramp.yaml").write_text((workdir / "two.yaml").read_text() + "batch_ramp: {start: 0.25, tokens: 1024}\n")
    (workdir / "ramp-settings.yaml").write_text("seq_len: 32\nglobal_batch: 8\nmicro_batch: 1\nwarmup: 2\ndtype: fp32\n"
                                                "checkpoint_every: 3\nkeep_checkpoints: 10\nlr: 3.0e-4\nmin_lr: 3.0e-5\n")  # fmt: skip
    common = ["training", "--mixture", "ramp.yaml", "--config", "ramp-settings.yaml", "--steps", "10"]
    run(*common, "--out", "ramp-whole", "--ranks", "1", cwd=workdir)
    name = "step-00000003"  # 512 tokens at 2 x 32 a step (steps 1-8), 512 at 4 x 32 (9-12): step 3 is inside the ramp
    shutil.copytree(workdir / "ramp-whole" / "checkpoints" / name, workdir / "ramp-resumed" / "checkpoints" / name)
    run(*common, "--out", "ramp-resumed", "--resume", "--dp-shard", "2", cwd=workdir)
    whole = metrics.load(str(workdir / "ramp-whole")).drop_duplicates("step", keep="last").set_index("step")
    resumed = metrics.load(str(workdir / "ramp-resumed")).drop_duplicates("step", keep="last").set_index("step")
    assert list(whole.tokens_per_step) == [64] * 8 + [128] * 2
    assert list(resumed.index) == list(range(4, 11))
    for step in resumed.index:
        assert abs(resumed.loss[step] - whole.loss[step]) / whole.loss[step] < LOSS_PARITY_RTOL, step
        assert resumed["tokens_per_source.web"][step] == whole["tokens_per_source.web"][step]
