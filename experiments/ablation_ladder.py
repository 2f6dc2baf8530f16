"""`curate ablate --ladder`: every variant's data trained on the same small ladder (IsoFLOP sets of `train ladder`,
no held-out rung), so a comparison is decided at more than one scale.

For each pair of variants it reports their order at every rung and whether the order at the smallest compute holds
at the largest (DataDecide's decision accuracy: the share of rungs whose order agrees with the largest compute's),
and from each variant's fitted law L = E + A/N^alpha + B/D^beta the tokens of one variant's data that reach the
other's loss at the same model size ("tokens of raw data needed to match" curated data), with a 95% interval from
the two laws' bootstrap refits over rungs.
"""

import itertools
import math
from pathlib import Path

import numpy as np

from experiments.ladder import PRESETS, Ladder, LadderSpec, model_size, run_ladder
from experiments.data_scaling import quantiles
from experiments.scaling_fit import Law, bootstrap


def ladder_spec(mixture: Path, smallest_tokens: int, vocab: int, max_epochs: float) -> LadderSpec:
    """The cpu preset's widths at three doubling budgets, the largest what the smallest width trains on the
    smallest variant's data within max_epochs (so every variant's every rung fits its data). No bracketing rungs:
    they would differ between variants (each follows its own losses), where the comparison pairs the same rungs,
    and a width below the smallest would repeat the data past max_epochs; a law they leave unpinned says so."""
    spec = LadderSpec(**(PRESETS["cpu"] | {"mixture": str(mixture), "forecast": False, "bracket": 0}))
    per_token = model_size(spec, spec.widths[0], vocab)[2]
    top = 0.95 * smallest_tokens * max_epochs * per_token
    return spec.model_copy(update={"budgets": [top / 4, top / 2, top]})


def run_ladders(out: Path, mixtures: dict[str, Path], smallest_tokens: int, vocab: int, max_epochs: float, log) -> dict:
    """Each variant's ladder in OUT/ladder/<variant> (resumed like `train ladder`), their comparison."""
    summaries = {}
    for name, mixture in mixtures.items():
        log(f"ladder of {name}")
        spec = ladder_spec(mixture, smallest_tokens, vocab, max_epochs)
        summaries[name] = run_ladder(Ladder(spec, str(out / "ladder" / name), log=log))
    return {"variants": {name: {"law": s["fits"]["total"]["law"], "intervals": s["fits"]["total"]["intervals"],
                                "identification": s["fits"]["total"]["identification"], "rungs": s["rungs"]}
                         for name, s in summaries.items()},
            "pairs": [compare_pair(a, b, summaries[a]["rungs"], summaries[b]["rungs"], summaries[a]["fits"]["total"]["law"],
                                   summaries[b]["fits"]["total"]["law"]) for a, b in itertools.combinations(summaries, 2)]}  # fmt: skip


def compare_pair(first: str, second: str, first_rungs: list[dict], second_rungs: list[dict], first_law: dict,
                 second_law: dict) -> dict:  # fmt: skip
    """The better of two variants at every rung (the same rungs, by name), ordered by compute; whether the smallest
    compute's order holds at the largest; and the tokens each needs to match the other at the largest rung."""
    theirs = {rung["run"]: rung for rung in second_rungs}
    rungs = sorted((rung for rung in first_rungs if rung["run"] in theirs), key=lambda rung: (rung["flops"], rung["run"]))
    orders = [{"run": rung["run"], "flops": rung["flops"], "difference": rung["val_loss"] - theirs[rung["run"]]["val_loss"],
               "better": first if rung["val_loss"] < theirs[rung["run"]]["val_loss"] else second} for rung in rungs]  # fmt: skip
    largest = max(orders, key=lambda order: order["flops"])["flops"]
    final = {order["better"] for order in orders if order["flops"] == largest}
    smallest = min(order["flops"] for order in orders)
    top = min((rung for rung in rungs if rung["flops"] == largest), key=lambda rung: rung["val_loss"])
    params, tokens = top["params_total"], top["tokens"]
    first_laws, second_laws = refits(rungs), refits([theirs[rung["run"]] for rung in rungs], seed=1)
    return {
        "variants": [first, second], "rungs": orders,
        "decision_accuracy": sum(order["better"] in final for order in orders) / len(orders),
        "smallest_order_holds": all(order["better"] in final for order in orders if order["flops"] == smallest) and len(final) == 1,
        "at": {"run": top["run"], "params": params, "tokens": tokens},
        f"tokens_of_{second}_to_match_{first}": tokens_to_match(second_law, loss(first_law, params, tokens), params),
        f"tokens_of_{first}_to_match_{second}": tokens_to_match(first_law, loss(second_law, params, tokens), params),
        f"tokens_of_{second}_to_match_{first}_interval": match_interval(second_laws, first_laws, params, tokens),
        f"tokens_of_{first}_to_match_{second}_interval": match_interval(first_laws, second_laws, params, tokens),
    }  # fmt: skip


def refits(rungs: list[dict], seed: int = 0) -> list[dict]:
    """A variant's law refitted on its rungs resampled (scaling_fit.bootstrap), as dicts."""
    laws = bootstrap([r["params_total"] for r in rungs], [r["tokens"] for r in rungs], [r["val_loss"] for r in rungs], seed=seed)
    return [law.as_dict() for law in laws]


def match_interval(matching: list[dict], matched: list[dict], params: float, tokens: float, level: float = 0.95) -> list[float]:
    """The central `level` of the tokens to match over independent pairs of the two variants' refits; a bound is
    inf when that share of the pairs never matches at this size."""
    needed = [tokens_to_match(a, loss(b, params, tokens), params) for a, b in zip(matching, matched)]
    return quantiles(needed, level) if needed else [math.nan, math.nan]


def loss(law: dict, params: float, tokens: float) -> float:
    """The law's loss; overflow to inf, as a bootstrap refit's extreme exponent can ask."""
    with np.errstate(over="ignore"):
        return float(Law(**law).loss(params, tokens))


def tokens_to_match(law: dict, target: float, params: float) -> float:
    """The tokens D at which `law` reaches `target` loss with `params` parameters: infinite when even infinite data
    of it stays above the target at that size."""
    with np.errstate(over="ignore"):
        gap = target - law["E"] - law["A"] / np.float64(params) ** law["alpha"]
        return float((law["B"] / gap) ** (1 / law["beta"])) if gap > 0 else math.inf
