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

from experiments.cli import curate_main, train_main
from experiments.ladder import Ladder, LadderSpec, load_ladder, make_rung, shape

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, "-c", "import sys; from experiments.cli import curate_main, train_main; sys.exit(train_main())"]


def test_the_shape_rule_and_the_rungs_spend_their_budget():
    spec = LadderSpec(mixture="m.yaml")
    assert shape(spec, 96) == {"dim": 96, "n_layers": 3, "n_heads": 6, "n_kv_heads": 6, "ffn_hidden": 256, "tie_embeddings": True}
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
    for lr_width, expected in ((64, {24: 4e-3 * 64 / 24, 64: 4e-3}), (None, {24: 4e-3, 64: 4e-3})):
        spec = load_ladder("cpu", mixture=str(mixture)).model_copy(update={"lr_width": lr_width})
        ladder = Ladder(spec, str(tmp_path / f"l{lr_width}"))
        for width, lr in expected.items():
            settings = yaml.safe_load(ladder.config(make_rung(ladder.spec, width, 1e12, ladder.vocab)).read_text())
            assert settings["lr"] == pytest.approx(lr) and settings["min_lr"] == pytest.approx(0.1 * lr)


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
    assert "iso-8.0e09-w48" in plan.stdout and "GPU-hours" in plan.stdout

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
    assert len(results(out)) == 13 and any(name.startswith("holdout-") for name in results(out))

    summary = json.loads((out / "fit.json").read_text())
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
