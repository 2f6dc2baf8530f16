"""`curate decide` end to end on real parts: two curated inputs, three recipes, two scales, killed and resumed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from experiments.decide import load_decision

CURATE = [sys.executable, "-m", "experiments"]


def write_documents(folder: Path, texts: list[str], prefix: str) -> None:
    folder.mkdir(parents=True)
    for part in range(2):
        rows = texts[part::2]
        pq.write_table(pa.table({"id": [f"{prefix}-{part}-{i}" for i in range(len(rows))], "text": rows}),
                       folder / f"part-{part}.parquet")  # fmt: skip


def spec_file(tmp_path: Path) -> Path:
    """Python's help topics and its modules' docstrings: two real, different kinds of prose."""
    import pydoc_data.topics

    from curation.sources.python_docs import module_docstrings

    write_documents(tmp_path / "topics", [t for t in pydoc_data.topics.topics.values() if len(t) > 400], "topic")
    write_documents(tmp_path / "modules", [t for t in module_docstrings().values() if len(t) > 400][:150], "module")
    evals = tmp_path / "mc.jsonl"
    evals.write_text("".join(json.dumps({"query": f"Question {i}: the keyword that defines a function is",
                                         "choices": ["def", "banana"], "gold": 0}) + "\n" for i in range(8)))  # fmt: skip
    spec = {
        "curated": {"topics": {"recipe": "parquet-documents", "input": [str(tmp_path / "topics" / "*.parquet")]},
                    "modules": {"recipe": "parquet-documents", "input": [str(tmp_path / "modules" / "*.parquet")]}},
        "recipes": {"topics": {"topics": 1}, "modules": {"modules": 1}, "mix": {"topics": 1, "modules": 1}},
        "target": {"curated": ["topics", "modules"], "fraction": 0.1, "max_tokens": 96},
        "evals": [{"name": "toy", "format": "mc", "path": str(evals)}],
        "widths": [16, 24], "tokens_per_param": 1.5, "seeds": [2, 2], "vocab_size": 512, "tokenizer_sample_mb": 2,
        "eval_sequences": 4,
    }  # fmt: skip
    path = tmp_path / "decision.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_decision_specs_are_validated_with_errors_that_name_the_field(tmp_path):
    path = spec_file(tmp_path)
    spec = yaml.safe_load(path.read_text())
    assert load_decision(str(path)).seeds == [2, 2]
    from experiments.decide import Decision

    assert Decision(load_decision(str(path)), str(tmp_path / "o")).ladder_spec.lr == 8e-3  # the cpu preset's
    path.write_text(yaml.safe_dump(spec | {"lr": 1e-3}))
    assert Decision(load_decision(str(path)), str(tmp_path / "o")).ladder_spec.lr == 1e-3
    for change, message in [({"seeds": [2, 2, 2]}, "seeds: one count per width"), ({"widths": [24, 16]}, "widths: .*increasing"),
                            ({"recipes": {"a": {"nope": 1}, "b": {"topics": 1}}}, "recipes.a: .*unknown: \\['nope'\\]"),
                            ({"target": {"curated": ["nope"]}}, "target.curated"), ({"ladder": "huge"}, "ladder: .*preset"),
                            ({"metric": "nope/error"}, "metric: 'nope/error' is none of .*toy/error")]:  # fmt: skip
        path.write_text(yaml.safe_dump(spec | change))
        with pytest.raises(ValueError, match=message):
            load_decision(str(path))
    plan = subprocess.run(CURATE + ["decide", str(path.with_name("ok.yaml"))], capture_output=True, text=True)
    assert plan.returncode == 2 and "ok.yaml" in plan.stderr and "Traceback" not in plan.stderr


def synthetic_decision(tmp_path: Path, widths: list[int], metric: str = "target_loss", seeds: int = 3) -> dict:
    """`summarize` over runs made up with a known order (recipe a best, c worst; the gap shrinking with scale as the
    losses fall with compute) and an evaluation set on which the order is reversed: no training."""
    from types import SimpleNamespace

    from experiments.decide import DecideSpec, summarize

    rng = np.random.default_rng(0)
    (tmp_path / "toy.jsonl").write_text(json.dumps({"query": "q", "choices": ["a", "b"], "gold": 0}) + "\n")
    spec = DecideSpec(curated={"x": {"recipe": "parquet-documents", "input": ["x"]}}, target={"curated": ["x"]},
                      recipes={r: {"x": 1} for r in "abc"}, widths=widths, seeds=[seeds] * len(widths), metric=metric,
                      evals=[{"name": "toy", "format": "mc", "path": str(tmp_path / "toy.jsonl")}])  # fmt: skip
    tokens = rng.integers(20, 200, 400)
    jobs, finished = [], {}
    for scale, width in enumerate(widths):
        flops = 1e9 * 4**scale
        for r, recipe in enumerate("abc"):
            for seed in range(seeds):
                run = f"{recipe}-seed{seed}-w{width}"
                loss = 6.0 * (flops / 1e9) ** -0.1 + 0.1 * r + rng.normal(0, 0.005)
                correct = rng.random(100) < 0.3 + 0.1 * r  # the evaluation set prefers c
                jobs.append({"run": run, "recipe": recipe, "seed": seed, "scale": scale,
                             "rung": SimpleNamespace(flops=flops, params_total=1000 * width, tokens=10000 * width)})  # fmt: skip
                finished[run] = {"result": {"val_loss": loss, "seconds": 1.0},
                                 "losses": pa.table({"loss_sum": (loss + rng.normal(0, 0.1, 400)) * tokens, "tokens": tokens}),
                                 "scores": {"toy": {"item_correct": correct.tolist(), "item_gold_per_char": (-rng.random(100)).tolist()}}}  # fmt: skip
    target = pa.table({"id": [str(i) for i in range(400)], "tokens": [[0] * int(t) for t in tokens]})
    return summarize(spec, jobs, finished, {}, target)


def test_the_metric_named_in_the_spec_is_the_one_reported_and_the_search_is_held_apart(tmp_path):
    results = synthetic_decision(tmp_path, [16, 24], metric="toy/error")
    assert results["deciding"]["metric"] == "toy/error"
    assert results["deciding"]["against_itself"] == results["decisions"]["toy/error"]["against_itself"]
    assert results["decisions"]["target_loss"]["against_itself"]["0"]["accuracy"] == 1.0  # a < b < c at both scales
    for truth, found in results["metric_search"].items():
        assert "other half" in found["how"], truth
    from experiments.decide_report import deciding_line

    assert deciding_line(results).startswith("Deciding metric toy/error (named in the spec)")
    target = results["target"]
    assert target["documents"] == 400 and 0 < target["document_half_width"] and target["documents_for_goal"] > 0


def test_a_forecast_needs_three_smaller_scales_and_carries_an_interval(tmp_path):
    from experiments.decide_report import render

    two = synthetic_decision(tmp_path, [16, 24])
    assert two["forecasts"] == {"made": False, "why": "no forecast: needs 3 smaller scales (this decision has 1)"}
    assert "no forecast: needs 3 smaller scales" in render(two)
    four = synthetic_decision(tmp_path, [16, 24, 32, 48])
    for recipe, found in four["forecasts"]["recipes"].items():
        low, high = found["interval"]
        assert low < found["predicted"] < high and abs(found["relative_error"]) < 0.02, (recipe, found)
    assert "95% interval (seeds)" in render(four)


def test_a_decision_folder_trained_under_another_training_rule_is_refused(tmp_path):
    """decision.json pins the preset's training rule too: the same spec after the rule changed (here its lr) is
    another decision, not a resume that would mix runs of both rules."""
    from experiments.decide import Decision

    spec = load_decision(str(spec_file(tmp_path)))
    Decision(spec, str(tmp_path / "o")).check_same()
    Decision(spec, str(tmp_path / "o")).check_same()  # the same: a resume
    record = tmp_path / "o" / "decision.json"
    written = json.loads(record.read_text())
    del written["training_rule"]["average_last"]  # as written before the field existed, when every run ended unaveraged
    record.write_text(json.dumps(written))
    Decision(spec, str(tmp_path / "o")).check_same()  # still a resume
    changed = Decision(spec, str(tmp_path / "o"))
    changed.ladder_spec = changed.ladder_spec.model_copy(update={"lr": 1e-3})
    with pytest.raises(ValueError, match="holds another decision"):
        changed.check_same()


def test_the_target_is_scored_on_each_documents_first_max_tokens(tmp_path):
    from experiments.decide import scored_target

    path = tmp_path / "target.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "tokens": [list(range(10)), [7, 8], []], "split": ["x"] * 3}), path)
    assert scored_target(path, None).to_pydict() == {"id": ["a", "b", "c"], "tokens": [list(range(10)), [7, 8], []]}
    assert scored_target(path, 4).to_pydict() == {"id": ["a", "b", "c"], "tokens": [[0, 1, 2, 3], [7, 8], []]}


@pytest.mark.slow
def test_a_killed_decision_resumes_and_retrains_nothing_finished(tmp_path):
    path, out = spec_file(tmp_path), tmp_path / "out"
    command = CURATE + ["decide", str(path), "--out", str(out), "--num-cpus", "2"]
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + 600
    while not list(out.glob("train/*/results/*.json")) and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGKILL)  # the whole command, its Ray and its training runs, mid-way
    first.wait()
    finished = {p: p.stat().st_mtime_ns for p in out.glob("train/*/results/*.json")}
    logs = {p.with_suffix(".log").parent.parent / "runs" / f"{p.stem}.log": None for p in finished}
    logs = {log: log.stat().st_size for log in logs if log.is_file()}
    assert finished, "no run finished before the kill"
    second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # finished runs were not trained again
    assert {log: log.stat().st_size for log in logs} == logs
    results = json.loads((out / "results.json").read_text())
    assert len(results["runs"]) == 3 * 2 * 2 and results["compute_span"] > 1
    assert set(results["decisions"]) == {"target_loss", "toy/error", "toy/gold_nats_per_char"}
    for decision in results["decisions"].values():
        found = decision["against_itself"]["0"]
        assert found["pairs_resolved"] + found["pairs_unresolved"] == 3
    target = pq.read_table(out / "target" / "part-00000.parquet")
    trained_ids = {i for p in out.glob("curated/*/tokens/part-*.parquet")
                   for i, split in zip(*pq.read_table(p, columns=["id", "split"]).to_pydict().values()) if split == "train"}  # fmt: skip
    assert target.num_rows and not trained_ids & set(target["id"].to_pylist())  # no recipe trains on the target
    scored = pq.read_table(next(out.glob("doc_losses/*.parquet")))["tokens"].to_numpy()
    assert scored.max() == 96 and len(scored) == target.num_rows  # each document's first 96 tokens, every document
    (out / "report.html").unlink()
    report = subprocess.run(CURATE + ["report", str(out)], capture_output=True, text=True)
    assert report.returncode == 0 and "Decision accuracy" in (out / "report.html").read_text()
    assert "target loss per recipe" in second.stdout
