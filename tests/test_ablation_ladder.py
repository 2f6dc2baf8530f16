"""`curate ablate --ladder`'s comparison of two variants' ladders: orders per rung, decision accuracy, tokens to match."""

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from experiments.ablation import Ablation, AblationSpec, VariantSpec
from experiments.ablation_ladder import compare_pair, loss, tokens_to_match
from experiments.ablation_report import ladder_table
from curation.recipe import RecipeError

CURATED = {"E": 1.8, "A": 400.0, "alpha": 0.34, "B": 2000.0, "beta": 0.36}
RAW = CURATED | {"B": 4000.0}  # the same law with data worth half as much per token


def rungs(law: dict, noise: dict | None = None) -> list[dict]:
    out = []
    for flops in (1e18, 2e18, 4e18):
        for params in (1e7, 2e7, 4e7):
            tokens = flops / (6 * params)
            out.append({"run": f"{flops:.0e}-{params:.0e}", "flops": flops, "params_total": params, "tokens": tokens,
                        "val_loss": loss(law, params, tokens) + (noise or {}).get(f"{flops:.0e}-{params:.0e}", 0.0)})  # fmt: skip
    return out


def test_tokens_to_match_inverts_the_law():
    params, tokens = 4e5, 1e7
    needed = tokens_to_match(RAW, loss(CURATED, params, tokens), params)
    assert math.isclose(loss(RAW, params, needed), loss(CURATED, params, tokens), rel_tol=1e-9)
    assert math.isclose(needed / tokens, 2 ** (1 / 0.36), rel_tol=1e-6)  # B doubled: 2^(1/beta) times the tokens
    assert tokens_to_match(RAW, RAW["E"], params) == math.inf  # below what any amount of it reaches at this size


def test_a_consistent_order_has_decision_accuracy_one_and_a_flip_at_small_scale_is_counted():
    pair = compare_pair("curated", "raw", rungs(CURATED), rungs(RAW), CURATED, RAW)
    assert pair["decision_accuracy"] == 1.0 and pair["smallest_order_holds"]
    assert all(order["better"] == "curated" for order in pair["rungs"])
    assert math.isclose(pair["tokens_of_raw_to_match_curated"] / pair["at"]["tokens"], 2 ** (1 / 0.36), rel_tol=1e-6)
    flipped = rungs(CURATED, {"1e+18-1e+07": 1.0, "1e+18-2e+07": 1.0, "1e+18-4e+07": 1.0})
    pair = compare_pair("curated", "raw", flipped, rungs(RAW), CURATED, RAW)
    assert pair["decision_accuracy"] == 6 / 9 and not pair["smallest_order_holds"]


def test_tokens_to_match_from_a_law_not_identified_is_flagged():
    pair = compare_pair("curated", "raw", rungs(CURATED), rungs(RAW), CURATED, RAW)
    checked = {"curated": {"identified": True, "reasons": []}, "raw": {"identified": False, "reasons": ["E 1e-09 at or below its bound 0"]}}
    ladder = {"pairs": [pair], "variants": {name: {"identification": check} for name, check in checked.items()}}
    row = ladder_table(ladder).loc["curated vs raw"]
    assert row["tokens of raw to match curated, x [95%]"].endswith(" (law of raw not identified)")
    ladder["variants"]["raw"]["identification"] = checked["curated"]
    assert "not identified" not in ladder_table(ladder).to_string()


def test_the_tokens_to_match_interval_holds_the_true_ratio_when_rungs_are_noisy():
    noise = np.random.default_rng(3).normal(0, 0.005, 9)
    noisy = lambda law: [rung | {"val_loss": rung["val_loss"] + e} for rung, e in zip(rungs(law), noise)]  # noqa: E731
    pair = compare_pair("curated", "raw", noisy(CURATED), noisy(RAW), CURATED, RAW)
    low, high = pair["tokens_of_raw_to_match_curated_interval"]
    assert low <= 2 ** (1 / 0.36) * pair["at"]["tokens"] <= high and low < high
    low, high = pair["tokens_of_curated_to_match_raw_interval"]
    assert low <= 2 ** (-1 / 0.36) * pair["at"]["tokens"] <= high


def test_ladder_rungs_validate_on_the_deciding_slice_only(tmp_path):
    """The ladders' mixtures name a validation set of the held-out documents the base recipe keeps, so the laws fitted
    to rung losses (and the tokens to match) measure the slice the ablation decides on, not the junk curation removes."""
    spec = AblationSpec(variants=[VariantSpec(name="raw", recipe="extract-only")])
    ablation = Ablation(spec, str(tmp_path), ["in.warc.gz"], "sample")
    base = ablation.curated("base")
    stages = [{"stage": stage.stage} for stage in ablation.recipes["base"].stages]
    (base / f"{len(stages):02d}_{stages[-1]['stage']}").mkdir(parents=True)
    (base / "manifest.json").write_text(json.dumps({"inputs": ["in.warc.gz"], "recipe": {"stages": stages},
                                                    "stages": {f"{len(stages):02d}_{stages[-1]['stage']}": {"shards": {"0": {}}}}}))  # fmt: skip
    pq.write_table(pa.table({"id": ["b", "d", "x"]}), base / f"{len(stages):02d}_{stages[-1]['stage']}" / "part-00000.parquet")
    documents = tmp_path / "validation" / "part-00000.parquet"
    (tmp_path / "validation" / "tokens").mkdir(parents=True)
    pq.write_table(pa.table({"id": list("abcd"), "tokens": [[1, 2], [3], [4, 5, 6], [7]], "n_tokens": [2, 1, 3, 1]}),
                   tmp_path / "validation" / "tokens" / "part-00000.parquet")  # fmt: skip

    deciding = ablation.deciding_documents(documents)
    held = pq.read_table(deciding.parent / "tokens" / deciding.name)
    assert held["id"].to_pylist() == ["b", "d"] and held["tokens"].to_pylist() == [[3], [7]]
    mixture = yaml.safe_load(ablation.mixture("raw", deciding, "ladder-raw").read_text())
    assert mixture["sources"]["web"]["validation_paths"] == [str(deciding.parent.resolve() / "tokens" / "part-*.parquet")]
    assert "validation-kept" in mixture["sources"]["web"]["validation_paths"][0] and "raw" in mixture["sources"]["web"]["paths"][0]
    everything = Ablation(spec.model_copy(update={"deciding_slice": "all"}), str(tmp_path), ["in.warc.gz"], "sample")
    assert everything.deciding_documents(documents) == documents


def test_adding_data_scaling_or_a_ladder_reuses_the_ablation_but_another_seed_count_is_refused(tmp_path):
    spec = AblationSpec(variants=[VariantSpec(name="raw", recipe="extract-only")])
    Ablation(spec, str(tmp_path), ["in.warc.gz"], "sample").check_same_ablation()
    more = spec.model_copy(update={"data_scaling": [0.5, 2.0], "ladder": True})
    Ablation(more, str(tmp_path), ["in.warc.gz"], "sample").check_same_ablation()
    with pytest.raises(RecipeError, match="holds another ablation"):
        Ablation(spec.model_copy(update={"seeds": 5}), str(tmp_path), ["in.warc.gz"], "sample").check_same_ablation()
