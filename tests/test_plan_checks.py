"""The checks under `train ladder --plan` and `curate decide --plan`: budgets a plan cannot use, data asked past
max_epochs (or, before the data is built, the data it would need), and a preset's range, one line each."""

import pytest
import yaml

from experiments.cli import curate_main, train_main
from experiments.ladder import LadderSpec, load_ladder, make_rung, model_size
from experiments.plan_checks import (NOT_CHECKED, OK, PRESET_RANGES, PROBLEM, budget_check, data_check, range_check,
                                     unbuilt_data_check)  # fmt: skip
from tests.test_decide import spec_file
from tests.test_ladder import code_shards
from training.plan import SourcePlan

SPEC = LadderSpec(mixture="m.yaml")


def test_a_budget_under_half_a_step_changes_nothing_and_one_past_any_run_answers_nothing():
    rungs = [make_rung(SPEC, width, budget, 2048) for budget in (1e6, 1e7, 1e12) for width in (24, 64)]
    capped = budget_check(rungs, [1e21])
    assert capped.status == PROBLEM and capped.text.startswith("1e+06, 1e+07 FLOPs ask less than half a step of w24, w64")
    assert "raise them to at least" in capped.text and "\n" not in capped.line()
    rungs = [make_rung(SPEC, width, budget, 2048) for budget in (5e11, 1e12, 2e12) for width in (24, 64)]
    assert budget_check(rungs, [1e40]).text.startswith("--budget 1e+40 FLOPs is past 1e+28")
    answered = budget_check(rungs, [1e21])
    assert answered.status == OK and "up to 5e+08x the largest rung" in answered.text


def test_data_past_max_epochs_is_a_problem_and_data_not_built_says_what_it_needs():
    def source(asked: int) -> SourcePlan:
        return SourcePlan("code", documents=10, available=10_000_000, asked=asked, max_epochs=1.0, held_out=0)

    over = data_check([("iso-5e12-w24", [source(13_000_000)]), ("iso-2e13-w24", [source(53_000_000)]), ("w64", [source(1)])])
    assert over.status == PROBLEM and over.text.startswith("2 of 3 rungs repeat their data past max_epochs")
    assert "the most, iso-2e13-w24: source 'code' would be repeated 5.3 times" in over.text
    assert data_check([("w64", [source(5_000_000)])]).status == OK
    unbuilt = unbuilt_data_check([("a", "code", 5.0e6), ("b", "code", 5.3e7), ("b", "web", 2e6)], "no shards at x")
    assert unbuilt.line() == ("data: not checked: data not built yet (no shards at x); at max_epochs it needs at least "
                              "53,000,000 training tokens of 'code' (b); 2,000,000 training tokens of 'web' (b)")  # fmt: skip


def test_the_cpu_preset_flags_a_width_that_would_train_for_years():
    """`curate decide`'s widths [20, 4096] at 10 tokens per parameter, 15 runs each (3 seeds x 5 recipes)."""
    sizes = {width: model_size(SPEC, width, 2048) for width in (20, 4096)}
    plan = {width: (params, 15 * 10 * params * per_token) for width, (params, _, per_token) in sizes.items()}
    far = range_check("cpu", PRESET_RANGES["cpu"], plan)
    assert far.status == PROBLEM and "years on 2 CPU cores" in far.text and "w4096 alone" in far.text
    assert "w4096 has up to 2.6e+10 parameters" in far.text and far.text.endswith("or plan for the gpu preset")
    assert range_check("cpu", PRESET_RANGES["cpu"], {20: plan[20]}).status == OK


def test_train_ladder_plan_checks_budgets_data_and_range_and_works_before_the_data_is_built(tmp_path, capsys):
    mixture = code_shards(tmp_path)
    command = ["ladder", "--mixture", str(mixture), "--out", str(tmp_path / "l"), "--plan"]
    assert train_main(command + ["--budget=-5"]) == 2
    assert capsys.readouterr().err.strip() == ("train ladder: cpu: budget_queries: -5: not a compute budget; give finite "
                                               "FLOPs above 0, e.g. 1e21")  # fmt: skip
    assert train_main(command + ["--budgets", "5e11,5e12,5e13"]) == 1
    lines = capsys.readouterr().out.splitlines()
    (data,) = [line for line in lines if line.startswith("data: ")]
    assert data.startswith("data: problem: ") and "over its max_epochs 4" in data
    assert [line.split(":")[1] for line in lines if line.startswith(("budgets: ", "range: "))] == [" ok", " ok"]

    missing = tmp_path / "missing.yaml"
    missing.write_text(yaml.safe_dump({"name": "m", "sources": {"web": {"paths": [str(tmp_path / "none" / "*.parquet")]}}}))
    assert train_main(["ladder", "--mixture", str(missing), "--out", str(tmp_path / "m"), "--plan"]) == 0
    out = capsys.readouterr().out
    assert "vocabulary 2,048 assumed" in out and f"data: {NOT_CHECKED}: data not built yet (no token shards" in out
    assert "training tokens of 'web' (iso-2.0e12-w24)" in out and not (tmp_path / "m").exists()


def test_curate_decide_plan_flags_a_width_past_the_cpu_presets_range(tmp_path, capsys):
    path = spec_file(tmp_path)
    spec = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump(spec | {"widths": [16, 24, 1024], "seeds": [2, 2, 2], "evals": []}))
    assert curate_main(["decide", str(path), "--out", str(tmp_path / "out"), "--plan"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[:2] for line in lines[-3:]] == [["budgets", " ok"], ["data", " not checked"], ["range", " problem"]]
    assert "w1024 alone" in lines[-1] and "past the 1 day the cpu preset is meant for" in lines[-1]
    path.write_text(yaml.safe_dump(spec | {"evals": []}))
    assert curate_main(["decide", str(path), "--out", str(tmp_path / "out"), "--plan"]) == 0
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("budget", [0.0, -5.0, float("nan"), float("inf")])
def test_a_ladder_refuses_a_budget_no_plan_can_use_naming_the_field(budget):
    with pytest.raises(ValueError, match="^ladder: budgets: .*not a compute budget; give finite FLOPs above 0"):
        load_ladder(None, mixture="m.yaml", budgets=[budget, 1e12, 2e12])
    with pytest.raises(ValueError, match="^ladder: holdout_factor: "):
        load_ladder(None, mixture="m.yaml", holdout_factor=budget)
