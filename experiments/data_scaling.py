"""Tokens of one variant's data that reach another's loss ("tokens of raw data needed to match" curated data).

Each variant is also trained on fractions of the ablation's token budget D0 (one model size: the ablation's), its loss
on the deciding slice fitted as L(D) = E + B / D^beta (the data term of Chinchilla's law at a fixed N; E absorbs
the model-size term), and that law inverted at the base's loss at D0; also, with no law, between the measured points. The 95% intervals
resample the deciding slice's documents (one draw resamples every run's per-document losses alike, so the runs stay
paired) and add seed noise: each point's loss moves by a normal draw with the spread of the variant's seeds at the
budget (where it has several) over the square root of the point's seeds.
"""

import math

import numpy as np
from scipy.interpolate import PchipInterpolator

from experiments.scaling_fit import EXPONENT_RANGE, parameter_reasons

BETAS = np.geomspace(*EXPONENT_RANGE, 600)  # the exponents searched; E and B are linear given beta


def fit(fractions, losses) -> np.ndarray:
    """(E, B, beta) of L = E + B / fraction^beta fitted by least squares to `losses` (..., points) at `fractions`
    (tokens over D0), a row per leading index; NaN where no beta gives B > 0 (loss not falling with tokens)."""
    losses = np.asarray(losses, dtype=np.float64)
    x = np.asarray(fractions, dtype=np.float64)[None, :] ** -BETAS[:, None]  # (betas, points)
    x_centred = x - x.mean(-1, keepdims=True)
    y = losses[..., None, :]  # (..., 1, points)
    slope = (x_centred * (y - y.mean(-1, keepdims=True))).sum(-1) / (x_centred**2).sum(-1)
    intercept = y.mean(-1) - slope * x.mean(-1)
    error = ((y - intercept[..., None] - slope[..., None] * x) ** 2).sum(-1)
    error = np.where(slope > 0, error, np.inf)
    best = error.argmin(-1)
    picked = np.take_along_axis
    law = np.stack([picked(intercept, best[..., None], -1)[..., 0], picked(slope, best[..., None], -1)[..., 0],
                    BETAS[best]], axis=-1)  # fmt: skip
    return np.where(np.isfinite(picked(error, best[..., None], -1)), law, np.nan)


def fraction_to_reach(law, target) -> np.ndarray:
    """The fraction of D0 at which `law` (E, B, beta rows) reaches `target`: inf when it never does (target at or
    below E), NaN when the law is undefined."""
    law, target = np.asarray(law, dtype=np.float64), np.asarray(target, dtype=np.float64)
    gap = target - law[..., 0]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        reached = (law[..., 1] / gap) ** (1 / law[..., 2])
    return np.where(np.isnan(law[..., 0]), np.nan, np.where(gap > 0, reached, np.inf))


def slice_losses(sums: np.ndarray, tokens: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Loss per token of runs (seeds, documents) averaged over seeds, on each draw (rows of document indices)."""
    mean = sums.mean(0)
    return mean[draws].sum(-1) / tokens[draws].sum(-1)


def compare(points: dict[str, list[dict]], tokens: np.ndarray, budget: int, base: str, samples: int = 2000,
            seed: int = 0, level: float = 0.95) -> dict:  # fmt: skip
    """`points`: per variant, one entry per trained token count: {"tokens", "runs", "sums": (seeds, documents)
    summed losses on the deciding slice's documents}; `tokens`: those documents' token counts. Per variant its
    points' losses, its law, and (besides the base) the tokens of its data that reach the base's loss at the budget
    and of the base's that reach its own, as tokens and as multiples of the budget, with intervals; and the same at
    the other's smaller trained token counts, as multiples of those (measurable where the budget's is out of reach:
    a variant's data runs out)."""
    documents, rng = len(tokens), np.random.default_rng(seed)
    draws = np.vstack([np.arange(documents), rng.integers(0, documents, (samples, documents))])
    losses, laws, seed_spread, checked = {}, {}, {}, {}
    for variant, entries in points.items():
        seeded = max(entries, key=lambda entry: len(entry["sums"]))["sums"]
        seed_spread[variant] = float(np.std(seeded.sum(1) / tokens.sum(), ddof=1)) if len(seeded) > 1 else 0.0
        losses[variant] = np.stack([slice_losses(entry["sums"], tokens, draws) for entry in entries], axis=-1)
        losses[variant][1:] += rng.normal(0, 1, losses[variant][1:].shape) * [
            seed_spread[variant] / math.sqrt(len(entry["sums"])) for entry in entries]  # fmt: skip
        fractions = [entry["tokens"] / budget for entry in entries]
        laws[variant] = fit(fractions, losses[variant]) if len(entries) >= 3 else np.full((len(draws), 3), np.nan)
        checked[variant] = identification(laws[variant], fractions, losses[variant][0], budget)
    at_budget = {variant: losses[variant][:, [entry["tokens"] for entry in points[variant]].index(budget)]
                 for variant in points}  # fmt: skip
    result = {"budget_tokens": budget, "documents": documents, "bootstrap_samples": samples, "variants": {}}
    for variant, entries in points.items():
        E, B, beta = laws[variant][0]
        summary = {
            "points": [{"tokens": entry["tokens"], "runs": entry["runs"], "loss": float(losses[variant][0, i])}
                       for i, entry in enumerate(entries)],  # fmt: skip
            "law": {"E": float(E), "B": float(B * budget**beta), "beta": float(beta)} | checked[variant],
            "seed_spread": seed_spread[variant],
        }
        if variant != base:
            for key, matching, target in ((f"tokens_to_match_{base}", variant, base), (f"{base}_tokens_to_match", base, variant)):
                fractions = [entry["tokens"] / budget for entry in points[matching]]
                measured = between_points(fractions, losses[matching], at_budget[target])
                from_law = fraction_to_reach(laws[matching], at_budget[target])
                summary[key] = {
                    "multiple": float(measured[0]), "tokens": float(measured[0] * budget),
                    "multiple_interval": quantiles(measured[1:], level), "trained_multiples": [min(fractions), max(fractions)],
                    "trained_tokens": [min(e["tokens"] for e in points[matching]), max(e["tokens"] for e in points[matching])],
                    "law_multiple": float(from_law[0]), "law_multiple_interval": quantiles(from_law[1:], level),
                    "law_identified": checked[matching]["identified"], "law_not_identified_because": checked[matching]["reasons"],
                    "at_smaller_budgets": [
                        {"tokens": entry["tokens"], "loss": float(losses[target][0, i]),
                         "multiple": float(found[0] * budget / entry["tokens"]),
                         "multiple_interval": quantiles(found[1:] * budget / entry["tokens"], level)}
                        for i, entry in enumerate(points[target]) if entry["tokens"] < budget
                        for found in [between_points(fractions, losses[matching], losses[target][:, i])]],
                }  # fmt: skip
        result["variants"][variant] = summary
    return result


def between_points(fractions: list[float], losses: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per draw, the fraction at which the measured losses (draws, points; by fraction) reach the target, no law
    assumed: log tokens as a monotone cubic (PCHIP) of the loss through the points, which follows a convex curve
    where a chord between two points would overshoot; a chord where the losses do not fall strictly. inf when even
    the largest fraction stays above the target, 0 when the smallest is already below it."""
    logs = np.log(fractions)
    found = np.empty(len(targets))
    for draw, (row, target) in enumerate(zip(losses, targets)):
        if target < row.min() or target > row.max():
            found[draw] = math.inf if target < row.min() else 0.0
        elif (np.diff(row) < 0).all():
            found[draw] = math.exp(PchipInterpolator(row[::-1], logs[::-1])(target))
        else:
            i = next((i for i in range(len(row) - 1) if (row[i] - target) * (row[i + 1] - target) <= 0 and row[i] != row[i + 1]), None)
            found[draw] = math.nan if i is None else math.exp(logs[i] + (row[i] - target) / (row[i] - row[i + 1]) * (logs[i + 1] - logs[i]))
    return found


def identification(laws: np.ndarray, fractions: list[float], losses: np.ndarray, budget: int) -> dict:
    """scaling_fit's check of a law's parameters (at a bound of its range, or a 95% interval over its spread) for
    L = E + B / D^beta: `laws` (E, B, beta) rows, the fit to `losses` at `fractions` first, then its resampled refits."""
    if np.isnan(laws[0]).any():
        return {"identified": False, "reasons": ["no law: fewer than 3 token counts, or a loss not falling with tokens"]}
    E, B, beta = laws[0]
    with np.errstate(over="ignore"):
        coefficients = laws[:, 1] * np.float64(budget) ** laws[:, 2]  # B in tokens, as the summary gives it
    intervals = {"E": quantiles(laws[1:, 0], 0.95), "B": quantiles(coefficients[1:], 0.95), "beta": quantiles(laws[1:, 2], 0.95)}
    terms = {"E": (E, E), "B": (coefficients[0], B / np.asarray(fractions) ** beta)}
    reasons = parameter_reasons(terms, losses, {"beta": beta}, intervals)
    return {"identified": not reasons, "reasons": reasons}


def quantiles(values, level: float) -> list[float]:
    tail = (1 - level) / 2
    return [float(v) for v in np.quantile(np.nan_to_num(values, nan=np.inf, posinf=np.inf), [tail, 1 - tail], method="inverted_cdf")]


def describe(key: str, match: dict) -> str:
    """One line: the measured multiple of the budget with its interval, the law's, and the multiples at smaller budgets."""
    law_low, law_high = match["law_multiple_interval"]
    law = "" if match["law_identified"] else f", not identified: {'; '.join(match['law_not_identified_because'])}"
    fewest, most = match["trained_tokens"]
    smaller = "".join(f"; at {point['tokens']:,} tokens {shown(point, fewest / point['tokens'], most / point['tokens'])}"
                      for point in match["at_smaller_budgets"])  # fmt: skip
    return (f"{key}: {shown(match, *match['trained_multiples'])} the budget, between measured points; "
            f"law: {match['law_multiple']:.3g}x [{law_low:.3g}, {law_high:.3g}]{law}{smaller}")


def shown(match: dict, smallest: float, largest: float) -> str:
    """A multiple with its interval; beyond the trained range, the bound it is."""
    low, high = match["multiple_interval"]
    if math.isinf(match["multiple"]):
        return f"more than {largest:.3g}x (beyond its trained tokens) [{low:.3g}, {high:.3g}]"
    if match["multiple"] == 0:
        return f"less than {smallest:.3g}x (below its trained tokens) [{low:.3g}, {high:.3g}]"
    return f"{match['multiple']:.3g}x [{low:.3g}, {high:.3g}]"
