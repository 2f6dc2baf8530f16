"""`train ladder`: the shape rule, the rung plan, validation of the spec, and a small real ladder under `train`
(torchrun, gloo) killed mid-run and resumed: finished rungs are skipped, the forecast is made before the held-out
rung trains and kept on a rerun, fit.json and report.html are written."""

import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from experiments import scaling_fit
from experiments.cli import curate_main, fit_lines, train_main
from experiments.ladder import Ladder, LadderSpec, bracketing_width, load_ladder, make_rung, shape, width_step
from tests.test_scaling_fit import ladder_points, noisy

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, "-c", "import sys; from experiments.cli import curate_main, train_main; sys.exit(train_main())"]


def test_the_shape_rule_and_the_rungs_spend_their_budget():
    spec = LadderSpec(mixture="m.yaml")
    assert shape(spec, 96) == {"dim": 96, "n_layers": 3, "n_heads": 6, "n_kv_heads": 6, "ffn_hidden": 256, "tie_embeddings": True,
                               "qk_norm": False, "init_std": None}  # fmt: skip
    small, large = make_rung(spec, 48, 2e12, 2048), make_rung(spec, 128, 2e12, 2048)
    assert small.params_total == small.params_non_embedding + 2048 * 48  # tied: the embedding is counted once
    for rung in (small, large):
        assert abs(rung.flops / rung.budget - 1) < 0.02 and rung.tokens == rung.steps * spec.global_batch * spec.seq_len
        assert rung.flops_per_token > 6 * rung.params_total  # attention's FLOPs beside 6N
    assert small.tokens > large.tokens


def test_ladder_specs_are_validated_with_errors_that_name_the_field(tmp_path, capsys):
    with pytest.raises(ValueError, match="widths"):
        load_ladder(None, mixture="m.yaml", widths=[48, 64, 96])
    with pytest.raises(ValueError, match="budgets"):
        load_ladder(None, mixture="m.yaml", budgets=[1e12, 2e12])
    with pytest.raises(ValueError, match="count"):
        load_ladder("cpu", count="kaplan")
    assert train_main(["ladder", "--mixture", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "l")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_each_rung_trains_at_its_widths_learning_rate(tmp_path):
    """The cpu preset scales the peak lr as 1/width from width 64's; `lr_width: null` gives every rung the same."""
    mixture = code_shards(tmp_path)
    for lr_width, expected in ((64, {24: 8e-3 * 64 / 24, 64: 8e-3}), (None, {24: 8e-3, 64: 8e-3})):
        spec = load_ladder("cpu", mixture=str(mixture)).model_copy(update={"lr_width": lr_width})
        ladder = Ladder(spec, str(tmp_path / f"l{lr_width}"))
        for width, lr in expected.items():
            settings = yaml.safe_load(ladder.config(make_rung(ladder.spec, width, 1e12, ladder.vocab)).read_text())
            assert settings["lr"] == pytest.approx(lr) and settings["min_lr"] == pytest.approx(0.1 * lr)


def test_the_ladders_model_settings_reach_each_rungs_training_config(tmp_path):
    """qk_norm and init_std of the spec land in every rung's model_overrides, and `train` builds that model."""
    from training.config import TrainConfig

    mixture = code_shards(tmp_path)
    (tmp_path / "ladder.yaml").write_text(f"mixture: {mixture}\nqk_norm: true\ninit_std: null\n")
    spec = load_ladder(str(tmp_path / "ladder.yaml"))
    ladder = Ladder(spec, str(tmp_path / "l"))
    settings = yaml.safe_load(ladder.config(make_rung(ladder.spec, 32, 1e12, ladder.vocab)).read_text())
    model = TrainConfig(**settings).model_config_for(ladder.vocab)
    assert (model.dim, model.qk_norm, model.init_std) == (32, True, None)


def test_a_ladder_recorded_before_a_field_existed_matches_only_the_setting_it_was_trained_with(tmp_path):
    """A ladder.json without init_std / qk_norm / z_loss was trained at 0.02 / off / 0: the same spec resumes it,
    one that changes any of them is refused instead of reusing rungs trained another way."""
    mixture = str(code_shards(tmp_path))
    out = tmp_path / "old"
    Ladder(load_ladder("cpu", mixture=mixture, init_std=0.02), str(out)).check_same_ladder()
    record = json.loads((out / "ladder.json").read_text())
    (out / "ladder.json").write_text(json.dumps({k: v for k, v in record.items() if k not in ("init_std", "qk_norm", "z_loss")}))
    Ladder(load_ladder("cpu", mixture=mixture, init_std=0.02), str(out)).check_same_ladder()
    for change in ({"init_std": 0.05}, {"qk_norm": True}, {"z_loss": 1e-4}):
        with pytest.raises(ValueError, match="holds another ladder"):
            Ladder(load_ladder("cpu", mixture=mixture, **({"init_std": 0.02} | change)), str(out)).check_same_ladder()


def test_a_set_whose_lowest_loss_is_at_an_edge_gets_the_next_width_past_it():
    """The cpu ladder of 2026-12-05 (docs/benchmarks.md): 5e11's lowest loss at width 24, its smallest."""
    assert bracketing_width({24: 4.5042, 32: 4.5232, 48: 5.5034, 64: 5.3409}) == 16
    assert bracketing_width({24: 4.3319, 32: 4.1743, 48: 4.9460, 64: 4.8060}) is None
    assert bracketing_width({24: 4.5, 32: 4.4, 48: 4.3, 64: 4.2}) == 96
    assert bracketing_width({16: 4.4, 24: 4.5, 32: 4.6, 48: 4.7, 64: 4.8}) == 8 and bracketing_width({8: 4.4, 16: 4.5, 24: 4.6}) is None
    assert [width_step(width, up=True) for width in (8, 64, 96, 1536)] == [16, 96, 144, 2304]
    assert [width_step(width, up=False) for width in (8, 12, 24, 512)] == [8, 8, 16, 344]


def test_bracketing_adds_widths_until_the_minimum_is_inside_or_bracket_are_added(tmp_path):
    """No training: each round's rungs get losses of a made-up curve whose optimum is at width 21 for the first
    budget (one extra width brackets it), below width 8 for the second (stops at the cap) and inside for the third;
    then the forecast from all of them."""
    optimum = {2e9: 21, 4e9: 1, 8e9: 45}
    trained = []

    def train_all(rungs):
        trained.append(sorted(rung.name for rung in rungs))
        return [{"run": rung.name, "width": rung.width, "budget": rung.budget, "params_total": rung.params_total,
                 "tokens": rung.tokens, "flops": rung.flops, "val_loss": 4 + (rung.width / optimum[rung.budget] - 1) ** 2}
                for rung in rungs]  # fmt: skip

    spec = load_ladder("cpu", mixture=str(code_shards(tmp_path)), budgets=[2e9, 4e9, 8e9])
    ladder = Ladder(spec, str(tmp_path / "ladder"), log=lambda line: None)
    ladder.train_all = train_all
    ladder.check_same_ladder()
    points = ladder.bracket(train_all(ladder.rungs))
    assert trained[1:] == [["iso-2.0e09-w16", "iso-4.0e09-w16"], ["iso-4.0e09-w8"]]
    assert len(points) == 12 + 3
    _, made = ladder.forecast(points)  # from every rung so far, saying whether its law is identified
    assert made["fitted_on"] == [point["run"] for point in points] and made["identification"]["identified"] is False
    assert json.loads((tmp_path / "ladder" / "forecast.json").read_text())["identification"] == made["identification"]
    ladder.spec = spec.model_copy(update={"bracket": 0})
    assert len(ladder.bracket(train_all(ladder.rungs))) == 12


def test_the_printout_of_a_law_not_identified_says_why_in_one_line_and_answers_no_budget():
    points = [dict(p, val_loss=float(noisy(3.0, 0.01, i))) for i, p in enumerate(ladder_points())]  # noise, no law
    fit = scaling_fit.summarize(points, budgets=[1e21], samples=10)
    forecast = {"run": "holdout-4.0e12-w40", "interval": [3.3, 3.9], "predicted_loss": 3.8301, "measured_loss": 3.8124,
                "relative_error": 0.0046, "identification": fit["identification"]}  # fmt: skip
    lines = fit_lines({"count": "total", "fits": {"total": fit}, "forecast": forecast})
    (verdict,) = [line for line in lines if "not identified" in line and not line.startswith("held-out")]
    assert verdict.startswith("the law is not identified: ") and "; ".join(fit["identification"]["reasons"]) in verdict
    assert "Budgets 1e+21 FLOPs not answered" in verdict and not any(line.startswith("budget ") for line in lines)
    assert lines[-1].endswith(f"error +0.46%; the law it was made from is {scaling_fit.not_identified(fit['identification'])}")
    identified = scaling_fit.summarize(ladder_points(), budgets=[1e21], samples=10)
    lines = fit_lines({"count": "total", "fits": {"total": identified}, "forecast": None})
    assert lines[-1].startswith("budget 1e+21 FLOPs: N ") and not any("identified" in line for line in lines)


def code_shards(folder: Path) -> Path:
    """Token shards of real text (this Python's standard library) with a small BPE, and a mixture over them."""
    from curation.tokenize import train_tokenizer, write_tokens

    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:120]
    texts = [path.read_text(errors="replace") for path in files]
    curated = folder / "curated"
    curated.mkdir(parents=True)
    pq.write_table(pa.table({"id": [path.name for path in files], "source": ["code"] * len(files), "text": texts}),
                   curated / "part-00000.parquet")  # fmt: skip
    write_tokens(str(curated), [str(curated / "part-00000.parquet")], train_tokenizer(iter(texts), 512), 0.1)
    mixture = folder / "mixture.yaml"
    mixture.write_text(f"name: code\nsources:\n  code:\n    paths: ['{curated}/tokens/part-*.parquet']\n    weight: 1.0\n")
    return mixture


def results(out: Path) -> list[str]:
    return sorted(path.stem for path in (out / "results").glob("*.json"))


@pytest.mark.slow
def test_a_small_ladder_killed_and_resumed_fits_and_forecasts(tmp_path):
    mixture = code_shards(tmp_path)
    out = tmp_path / "ladder"
    command = TRAIN + ["ladder", "cpu", "--mixture", str(mixture), "--out", str(out),
               "--widths", "16,24,32,48", "--budgets", "2e9,4e9,8e9", "--budget", "1e15"]  # fmt: skip
    plan = subprocess.run(command + ["--plan"], capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0, plan.stderr
    assert "iso-8.0e09-w48" in plan.stdout and "GPU-hours" in plan.stdout and "Extra rungs may be added" in plan.stdout

    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 600
    while len(results(out)) < 2 and time.time() < deadline and first.poll() is None:
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGKILL)  # the ladder and the `train` runs it started (ranks die with their launcher)
    first.wait()
    finished = results(out)
    assert 2 <= len(finished) < 12, first.stdout.read()
    stamps = {name: (out / "results" / f"{name}.json").stat().st_mtime_ns for name in finished}

    second = subprocess.run(command, capture_output=True, text=True, timeout=1500)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert f"resumed: {len(finished)} of 12 rungs already finished" in second.stdout
    assert {name: (out / "results" / f"{name}.json").stat().st_mtime_ns for name in finished} == stamps
    summary = json.loads((out / "fit.json").read_text())
    assert len(results(out)) == len(summary["rungs"]) >= 13 and any(name.startswith("holdout-") for name in results(out))
    forecast = summary["forecast"]
    held = json.loads((out / "results" / f"{forecast['run']}.json").read_text())
    assert forecast["measured_loss"] == held["val_loss"]
    assert sorted(forecast["fitted_on"]) == sorted(name for name in results(out) if name.startswith("iso-"))
    assert time.strptime(forecast["written_at"], "%Y-%m-%dT%H:%M:%SZ")
    assert (out / "forecast.json").stat().st_mtime_ns < (out / "results" / f"{forecast['run']}.json").stat().st_mtime_ns
    assert set(summary["fits"]) == {"total", "non_embedding"}
    for count, fit in summary["fits"].items():
        assert fit["n_used"] == count.replace("_", "-") and fit["law"]["alpha"] > 0 and fit["budgets"]
    assert "relative_error" in forecast and "fitted law" in second.stdout
    assert "<img" in (out / "report.html").read_text()
    assert curate_main(["report", str(out), "--html", str(tmp_path / "ladder.html")]) == 0  # `curate report` on a ladder
    assert (tmp_path / "ladder.html").read_text().count("<img") == (out / "report.html").read_text().count("<img") > 0

    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "resumed: 12 of 12 rungs already finished" in again.stdout
    assert json.loads((out / "forecast.json").read_text()) == {k: v for k, v in forecast.items()
                                                               if k not in ("measured_loss", "relative_error", "measured_in_interval")}  # fmt: skip
