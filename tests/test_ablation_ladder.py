"""`curate ablate --ladder`'s comparison of two variants' ladders: orders per rung, decision accuracy, tokens to match."""

import math

from experiments.ablation_ladder import compare_pair, loss, tokens_to_match

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
