"""Scaling-law fits of a model ladder: Chinchilla's Approach 3 as the replication fitted it, Approach 2 as a cross-check.

Approach 3 follows Besiroglu et al. 2024 ("Chinchilla Scaling: A replication attempt"): L = E + A/N^alpha + B/D^beta,
fitted in log space (a = log A, b = log B, e = log E) by minimizing the Huber loss (delta 1e-3) of
logsumexp(a - alpha log N, b - beta log D, e) - log L with L-BFGS from every point of a grid of initial values
(run as one numpy batch; the best few are then run on by scipy's L-BFGS-B to tight tolerances), with bootstrap
intervals over the points. Pure numpy and scipy, so it is tested against published numbers alone.

A fit always returns numbers, so `identification` says whether the points pin them. Not when some parameters move
together without changing any fitted loss (all points at one N), when a parameter is at a bound of its range (E, A
and B are exponentials of unbounded parameters, so their bound is 0, reached when their term adds under BOUND_SHARE
of the loss at every point; an exponent outside EXPONENT_RANGE), when a bootstrap interval spans more than
SCALE_SPREAD (E, A, B) or EXPONENT_SPREAD (alpha, beta) times its low end, or when an IsoFLOP group's parabola does
not bracket its minimum (its sizes miss the optimum the law extrapolates from).
"""

import itertools
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import minimize

HUBER_DELTA = 1e-3
# The replication's grid: 5 * 5 * 5 * 6 * 6 = 4500 starts.
FULL_GRID = {"alpha": np.arange(0, 2.01, 0.5), "beta": np.arange(0, 2.01, 0.5), "e": np.arange(-1, 1.01, 0.5),
             "a": np.arange(0, 25.1, 5), "b": np.arange(0, 25.1, 5)}  # fmt: skip
# Coarse enough that a fit of a few dozen points takes well under a second, still spanning the full grid's range.
DEFAULT_GRID = {"alpha": np.arange(0, 2.01, 0.5), "beta": np.arange(0, 2.01, 0.5), "e": np.array([-1.0, 0.0, 1.0]),
                "a": np.array([0.0, 10.0, 20.0]), "b": np.array([0.0, 10.0, 20.0])}  # fmt: skip
PARAMETER_ORDER = ("a", "b", "e", "alpha", "beta")
BOUND_SHARE = 1e-3  # a term under 0.1% of every loss is at its bound 0; so is an exponent this near an end of its range
# An exponent's range: below 0.01 a term is flat over any ladder (N^0.01 moves 12% from 1e5 to 1e10 parameters), above
# 4 it vanishes past the smallest point; no exponent the points can tell (data_scaling searches the same range).
EXPONENT_RANGE = (0.01, 4.0)
INSEPARABLE = 1e-6  # a singular value of the points' sensitivities (columns scaled to 1) this far below the largest
SCALE_SPREAD = 100.0  # a 95% interval of E, A or B over two orders of magnitude (high / low) leaves it unknown
EXPONENT_SPREAD = 10.0  # alpha or beta known only within a factor 10 says nothing of the compute-optimal split


@dataclass(frozen=True)
class Law:
    """L(N, D) = E + A / N^alpha + B / D^beta."""

    E: float
    A: float
    alpha: float
    B: float
    beta: float

    def loss(self, N, D):
        N, D = np.asarray(N, dtype=float), np.asarray(D, dtype=float)
        return self.E + self.A / N**self.alpha + self.B / D**self.beta

    def optimal(self, C, flops_per_param_token: float = 6.0):
        """(N*, D*) minimizing the loss at compute C = k N D (Chinchilla's closed form)."""
        per_token = np.asarray(C, dtype=float) / flops_per_param_token
        G = np.float64(self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))  # NaN, not complex, for a negative exponent
        N = G * per_token ** (self.beta / (self.alpha + self.beta))
        return N, per_token / N

    def tokens_per_param(self, C, flops_per_param_token: float = 6.0):
        N, D = self.optimal(C, flops_per_param_token)
        return D / N

    def as_dict(self) -> dict:
        return {name: float(value) for name, value in asdict(self).items()}


def _law(theta) -> Law:
    a, b, e, alpha, beta = theta
    return Law(E=float(np.exp(e)), A=float(np.exp(a)), alpha=float(alpha), B=float(np.exp(b)), beta=float(beta))


def _theta(law: Law) -> np.ndarray:
    return np.array([np.log(law.A), np.log(law.B), np.log(law.E), law.alpha, law.beta])


def huber(residuals, delta: float = HUBER_DELTA):
    absolute = np.abs(residuals)
    quadratic = np.minimum(absolute, delta)  # written so that huge residuals do not overflow a square
    return 0.5 * quadratic**2 + delta * (absolute - quadratic)


def _objectives(theta, log_N, log_D, log_L, delta):
    """The objective and its gradient for many parameter vectors at once: theta (S, 5), data (n,) or (S, n)."""
    a, b, e, alpha, beta = (theta[:, [i]] for i in range(5))
    terms = (a - alpha * log_N, b - beta * log_D, np.broadcast_to(e, np.broadcast(a, log_N).shape))
    top = np.maximum(np.maximum(terms[0], terms[1]), terms[2])
    weights = [np.exp(term - top) for term in terms]
    total = weights[0] + weights[1] + weights[2]
    residuals = top + np.log(total) - log_L
    slope = np.clip(residuals, -delta, delta) / total  # the Huber loss's derivative, times the softmax's denominator
    gradient = np.stack([(weights[0] * slope).sum(1), (weights[1] * slope).sum(1), (weights[2] * slope).sum(1),
                         -(weights[0] * slope * log_N).sum(1), -(weights[1] * slope * log_D).sum(1)], axis=1)  # fmt: skip
    return huber(residuals, delta).sum(1), gradient


def _dot(x, y):
    return np.einsum("ij,ij->i", x, y)


def _lbfgs_direction(gradient, steps, changes):
    """The two-loop recursion of L-BFGS per row, falling back to a short steepest-descent step where it points uphill."""
    direction = -gradient
    coefficients = []
    for step, change in zip(reversed(steps), reversed(changes)):
        rho = _safe_inverse(_dot(step, change))  # 0 for a pair without positive curvature: it is skipped
        coefficients.append((rho, rho * _dot(step, direction)))
        direction = direction - coefficients[-1][1][:, None] * change
    steepest = 0.1 / np.maximum(np.abs(gradient).max(1), 1e-300)
    scale = _dot(steps[-1], changes[-1]) * _safe_inverse(_dot(changes[-1], changes[-1])) if steps else steepest
    direction = direction * scale[:, None]
    for step, change, (rho, coefficient) in zip(steps, changes, reversed(coefficients)):
        direction = direction + (coefficient - rho * _dot(change, direction))[:, None] * step
    uphill = _dot(gradient, direction) >= 0
    direction[uphill] = -gradient[uphill] * steepest[uphill, None]
    return direction


def _batched_lbfgs(theta, log_N, log_D, log_L, delta, iterations: int = 400, memory: int = 10):
    """L-BFGS (two-loop recursion, backtracking Armijo line search) run from every row of theta at once.

    Each start follows its own path, as separate scipy runs would; batching them is what makes hundreds of starts
    cheap (one scipy run costs milliseconds of Python per iteration). A start stops when its step no longer lowers
    the objective.
    """
    theta = np.array(theta, dtype=float)
    value, gradient = _objectives(theta, log_N, log_D, log_L, delta)
    steps, changes = [], []
    active = np.ones(len(theta), dtype=bool)
    for _ in range(iterations):
        direction = _lbfgs_direction(gradient, steps, changes)
        slope = _dot(gradient, direction)
        length = np.where(active, 1.0, 0.0)
        accepted = ~active
        new_theta, new_value, new_gradient = theta.copy(), value.copy(), gradient.copy()
        for _ in range(16):
            trying = np.flatnonzero(~accepted)
            if not len(trying):
                break
            candidate = theta[trying] + length[trying, None] * direction[trying]
            data = [x[trying] if np.ndim(x) == 2 else x for x in (log_N, log_D, log_L)]
            candidate_value, candidate_gradient = _objectives(candidate, *data, delta)
            good = np.isfinite(candidate_value) & (candidate_value <= value[trying] + 1e-4 * length[trying] * slope[trying])
            new_theta[trying[good]], new_value[trying[good]] = candidate[good], candidate_value[good]
            new_gradient[trying[good]] = candidate_gradient[good]
            accepted[trying[good]] = True
            length[trying[~good]] /= 8
        step, change = new_theta - theta, new_gradient - gradient
        active &= accepted & (np.abs(step).max(1) > 1e-12) & (value - new_value > 1e-16 * np.maximum(value, 1e-300))
        theta, value, gradient = new_theta, new_value, new_gradient
        if not active.any():
            break
        steps, changes = (steps + [step])[-memory:], (changes + [change])[-memory:]
    return theta, value


def _safe_inverse(values):
    return np.where(values > 1e-300, 1 / np.where(values > 1e-300, values, 1.0), 0.0)


def objective(theta, log_N, log_D, log_L, delta: float = HUBER_DELTA):
    """Sum of Huber losses of the log-space residuals, and its gradient in (a, b, e, alpha, beta)."""
    value, gradient = _objectives(np.asarray(theta, dtype=float)[None], log_N, log_D, log_L, delta)
    return float(value[0]), gradient[0]


def _starts(grid: dict) -> np.ndarray:
    return np.array(list(itertools.product(*(grid[name] for name in PARAMETER_ORDER))), dtype=float)


def _fit_from(starts, log_N, log_D, log_L, delta, polished: int = 3) -> np.ndarray:
    """L-BFGS from every start; the `polished` best run on to tight tolerances in scipy's L-BFGS-B; the best of those."""
    thetas, values = _batched_lbfgs(starts, log_N, log_D, log_L, delta, iterations=150)
    values = np.where(np.isfinite(values), values, np.inf)
    results = [minimize(objective, thetas[index], args=(log_N, log_D, log_L, delta), jac=True, method="L-BFGS-B",
                        options={"gtol": 1e-14, "ftol": 1e-15, "maxiter": 1000})
               for index in np.argsort(values)[:polished]]  # fmt: skip
    return min(results, key=lambda result: result.fun).x


def _logs(N, D, L):
    N, D, L = (np.asarray(values, dtype=float) for values in (N, D, L))
    if not (N.shape == D.shape == L.shape) or N.ndim != 1:
        raise ValueError(f"scaling_fit: N, D and L must be 1-D of one length, got shapes {N.shape}, {D.shape}, {L.shape}")
    if len(N) < 5:
        raise ValueError(f"scaling_fit: {len(N)} points cannot determine the law's 5 parameters")
    return np.log(N), np.log(D), np.log(L)


def fit_law(N, D, L, delta: float = HUBER_DELTA, grid: dict | None = None) -> Law:
    """Approach 3: the best of the L-BFGS runs from every point of `grid` (DEFAULT_GRID; FULL_GRID is the replication's)."""
    return _law(_fit_from(_starts(grid or DEFAULT_GRID), *_logs(N, D, L), delta))


def least_squares_law(N, D, L) -> Law:
    """The same fit with squared log residuals: what the Huber loss is robust against (a reference for tests)."""
    # A Huber delta far above every residual makes the objective half the sum of squares.
    return _law(_fit_from(_starts(DEFAULT_GRID), *_logs(N, D, L), delta=1e6))


def bootstrap(N, D, L, samples: int = 200, seed: int = 0, delta: float = HUBER_DELTA, law: Law | None = None) -> list[Law]:
    """Laws refitted on points resampled with replacement, each from the full fit's optimum and a small grid around it.
    A resample whose refit degenerates (a coefficient overflows, or A, B or an exponent reaches 0) is left out: it
    would make every interval NaN or the frontier undefined.

    All samples' starts run as one batch of L-BFGS runs.
    """
    log_N, log_D, log_L = _logs(N, D, L)
    center = _theta(law or fit_law(N, D, L, delta))
    offsets = np.array([[0, 0, 0, 0, 0]] + [[2 * da, 2 * db, 0, 0.1 * da, 0.1 * db]
                                            for da in (-1, 1) for db in (-1, 1)], dtype=float)  # fmt: skip
    chosen = np.random.default_rng(seed).integers(0, len(log_N), (samples, len(log_N)))
    rows = np.repeat(chosen, len(offsets), axis=0)
    thetas, values = _batched_lbfgs(np.tile(center + offsets, (samples, 1)), log_N[rows], log_D[rows], log_L[rows], delta)
    best = np.nanargmin(np.where(np.isfinite(values), values, np.nan).reshape(samples, len(offsets)), axis=1)
    laws = [_law(thetas[sample * len(offsets) + start]) for sample, start in enumerate(best)]
    return [law for law in laws if np.isfinite(coefficients := [law.E, law.A, law.alpha, law.B, law.beta]).all()
            and min(coefficients[1:]) > 0]


def interval(values, level: float = 0.95) -> list[float]:
    """The percentile interval holding `level` of the values."""
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(np.asarray(values, dtype=float), [tail, 100 - tail])
    return [float(low), float(high)]


def floor_at_bound(law: Law, intervals: dict, losses) -> dict:
    """E's interval where the fit put E at its bound 0: the bootstrap refits start at the fit and stay there, so
    their interval was [0, 0] and missed the true E (3 of 20 laws drawn on the cpu ladder's rungs); the points say
    only that E lies between 0 and their lowest loss."""
    lowest = float(np.min(losses))
    if law.E >= BOUND_SHARE * lowest:
        return intervals
    return intervals | {"E": [0.0, max(intervals["E"][1], lowest)]}


def parameter_intervals(laws: list[Law], level: float = 0.95) -> dict:
    return {name: interval([getattr(law, name) for law in laws], level) for name in ("E", "A", "alpha", "B", "beta")}


def tokens_per_param_interval(laws: list[Law], C, flops_per_param_token: float = 6.0, level: float = 0.95):
    return interval([law.tokens_per_param(C, flops_per_param_token) for law in laws], level)


def loss_interval(laws: list[Law], N, D, level: float = 0.95):
    return interval([law.loss(N, D) for law in laws], level)


def group_by_compute(points: list[dict], tolerance: float = 0.05) -> list[list[dict]]:
    """Points whose FLOPs lie within `tolerance` (relative) of their group's smallest, smallest compute first."""
    groups: list[list[dict]] = []
    for point in sorted(points, key=lambda p: p["flops"]):
        if groups and point["flops"] <= groups[-1][0]["flops"] * (1 + tolerance):
            groups[-1].append(point)
        else:
            groups.append([point])
    return groups


def isoflop_minima(groups: list[list[dict]], flops_per_param_token: float = 6.0, at_flops: float | None = None) -> dict:
    """Approach 2: a parabola of L against log N per compute group, then power laws of its minima against C.

    Each group is a list of points {"params", "flops", "val_loss"} of about equal compute; groups with fewer than 3
    distinct sizes are skipped. D_opt = C / (k N_opt).
    """
    rows = []
    for group in groups:
        log_N = np.log([p["params"] for p in group])
        if len(np.unique(log_N)) < 3:
            continue
        losses = np.array([p["val_loss"] for p in group], dtype=float)
        curvature, slope, intercept = np.polyfit(log_N, losses, 2)
        flops = float(np.exp(np.mean(np.log([p["flops"] for p in group]))))
        if curvature > 0:
            log_N_opt = -slope / (2 * curvature)
            inside = bool(log_N.min() <= log_N_opt <= log_N.max())
        else:  # no minimum: the parabola opens downward, the sampled sizes do not bracket the optimum
            log_N_opt, inside = float(log_N[np.argmin(losses)]), False
        N_opt = float(np.exp(log_N_opt))
        rows.append({"flops": flops, "params": [float(p["params"]) for p in group], "losses": losses.tolist(),
                     "parabola": [float(curvature), float(slope), float(intercept)], "N_opt": N_opt,
                     "D_opt": flops / (flops_per_param_token * N_opt),
                     "L_opt": float(np.polyval([curvature, slope, intercept], log_N_opt)), "inside": inside})  # fmt: skip
    result = {"groups": rows, "flops_per_param_token": flops_per_param_token}
    usable = [row for row in rows if row["inside"]]
    if len(usable) < 2:
        return result | {"why": f"{len(usable)} compute group(s) with >= 3 sizes bracket their minimum; 2 are needed"}
    log_C = np.log([row["flops"] for row in usable])
    a, c = np.polyfit(log_C, np.log([row["N_opt"] for row in usable]), 1)
    b, d = np.polyfit(log_C, np.log([row["D_opt"] for row in usable]), 1)
    at_flops = float(at_flops if at_flops is not None else np.exp(log_C.max()))
    tokens_per_param = float(np.exp((b - a) * np.log(at_flops) + d - c))
    return result | {"a": float(a), "c": float(c), "b": float(b), "d": float(d), "groups_used": len(usable),
                     "at_flops": at_flops, "tokens_per_param": tokens_per_param}  # fmt: skip


def parameter_reasons(terms: dict, losses, exponents: dict, intervals: dict) -> list[str]:
    """Why a fitted law's parameters are not pinned, one line each: a parameter at a bound of its range or a 95%
    interval over its spread (the module docstring). `terms`: each positive coefficient's name -> (value, its term
    at the points); `exponents`: name -> value; `intervals`: name -> 95% interval."""
    reasons = []
    for name, (value, term) in terms.items():
        share = float(np.max(np.asarray(term, dtype=float) / np.asarray(losses, dtype=float)))
        if not share >= BOUND_SHARE:  # NaN too
            reasons.append(f"{name} {value:.3g} at or below its bound 0 (its term is at most {share:.2g} of the loss)")
    low, high = EXPONENT_RANGE
    for name, value in exponents.items():
        if not low * (1 + BOUND_SHARE) < value < high * (1 - BOUND_SHARE):
            reasons.append(f"{name} {value:.3g} at or past an end of its range [{low:g}, {high:g}]")
    for name, (low, high) in intervals.items():
        limit = EXPONENT_SPREAD if name in exponents else SCALE_SPREAD
        if not (low > 0 and high <= limit * low):
            reasons.append(f"{name}'s 95% interval [{low:.3g}, {high:.3g}] spans more than {limit:g}x")
    return reasons


def inseparable(law: Law, N, D) -> list[str]:
    """The parameters some direction moves without changing the law's loss at any point (all points at one N: A,
    alpha and E), from the singular values of the points' sensitivities to (A, B, E, alpha, beta) in log space.
    Bootstrap refits start at the fit and do not wander along such a direction, so their intervals miss it."""
    N, D = np.asarray(N, dtype=float), np.asarray(D, dtype=float)
    size, data, floor = law.A / N**law.alpha, law.B / D**law.beta, np.full(N.shape, law.E)
    columns = np.stack([size, data, floor, -size * np.log(N), -data * np.log(D)], axis=1) / (size + data + floor)[:, None]
    norms = np.linalg.norm(columns, axis=0)
    _, values, directions = np.linalg.svd(columns / np.where(norms > 0, norms, 1), full_matrices=False)
    flat = np.abs(directions[~(values > INSEPARABLE * values[0])])  # unit vectors of the directions that change nothing
    return [name for index, name in enumerate(("A", "B", "E", "alpha", "beta")) if (flat[:, index] > 0.1).any()]


def identification(law: Law, N, D, L, intervals: dict, approach2: dict) -> dict:
    """Whether Approach 3's law fitted on the points (N, D, L) is pinned by them, and every reason it is not, one
    line each: parameters the points cannot separate, `parameter_reasons`, and Approach 2's groups (of the same
    points) that do not bracket their minimum."""
    N, D = np.asarray(N, dtype=float), np.asarray(D, dtype=float)
    together, reasons = inseparable(law, N, D), []
    if together:
        reasons.append(f"the points cannot separate {', '.join(together)}: together they move without changing any fitted loss")
    terms = {"E": (law.E, law.E), "A": (law.A, law.A / N**law.alpha), "B": (law.B, law.B / D**law.beta)}
    reasons += parameter_reasons(terms, L, {"alpha": law.alpha, "beta": law.beta}, intervals)
    inside = sum(group["inside"] for group in approach2["groups"])
    if inside < len(approach2["groups"]):
        reasons.append(f"only {inside} of {len(approach2['groups'])} IsoFLOP groups bracket their minimum")
    return {"identified": not reasons, "reasons": reasons}


def not_identified(identification: dict | None) -> str:
    """What to say of a law after "the law is": empty when identified, else that it is not and why, in one line
    (None: a fit.json written before the check)."""
    if identification is None:
        return "of unknown identification (written before the check)"
    return "" if identification["identified"] else "not identified: " + "; ".join(identification["reasons"])


def compare_approaches(law: Law, approach2: dict, flops_per_param_token: float = 6.0) -> dict:
    """Approach 2's exponent and tokens per parameter beside Approach 3's at the same compute, and how far apart."""
    if "a" not in approach2:
        return {"why": approach2.get("why", "no Approach 2 fit")}
    a3 = law.beta / (law.alpha + law.beta)
    tokens3 = float(law.tokens_per_param(approach2["at_flops"], flops_per_param_token))
    return {"at_flops": approach2["at_flops"], "a_approach2": approach2["a"], "a_approach3": a3,
            "a_difference": approach2["a"] - a3, "tokens_per_param_approach2": approach2["tokens_per_param"],
            "tokens_per_param_approach3": tokens3,
            "tokens_per_param_ratio": approach2["tokens_per_param"] / tokens3}  # fmt: skip


def _arrays(points: list[dict]):
    return ([p["params"] for p in points], [p["tokens"] for p in points], [p["val_loss"] for p in points])


def forecast(points: list[dict], held_out, law: Law | None = None, laws: list[Law] | None = None,
             samples: int = 200, seed: int = 0) -> list[dict]:  # fmt: skip
    """Each held-out run's loss predicted from a fit of the other points, with its bootstrap interval and error.

    `held_out` names runs; `law` and `laws` (a fit and its bootstrap on the other points) are reused when given.
    """
    held_out = set(held_out)
    fitted = [p for p in points if p["run"] not in held_out]
    law = law or fit_law(*_arrays(fitted))
    laws = laws if laws is not None else bootstrap(*_arrays(fitted), samples=samples, seed=seed, law=law)
    rows = []
    for point in (p for p in points if p["run"] in held_out):
        predicted = float(law.loss(point["params"], point["tokens"]))
        low, high = loss_interval(laws, point["params"], point["tokens"])
        rows.append({"run": point["run"], "params": point["params"], "tokens": point["tokens"],
                     "flops": point["flops"], "measured": point["val_loss"], "predicted": predicted,
                     "interval": [low, high], "within_interval": bool(low <= point["val_loss"] <= high),
                     "relative_error": (predicted - point["val_loss"]) / point["val_loss"]})  # fmt: skip
    return rows


def check_budget(C) -> float:
    """C as a float, or a one-line ValueError for a budget no law answers: 0 divides by zero, a negative one gives NaN."""
    if not (np.isfinite(C) and C > 0):
        raise ValueError(f"scaling_fit: budget {float(C):g} FLOPs: a compute budget is a finite number of FLOPs above 0, "
                         "e.g. 1e21")
    return float(C)


def budget(law: Law, laws_bootstrap: list[Law], C: float, flops_per_param_token: float, identified: bool) -> dict:
    """What compute C asks for: the compute-optimal N and D, tokens per parameter and the loss to expect. A law not
    identified answers nothing: its numbers stay, marked, under `unidentified_law_numbers`."""
    C = check_budget(C)
    N, D = (float(value) for value in law.optimal(C, flops_per_param_token))
    optima = [law_b.optimal(C, flops_per_param_token) for law_b in laws_bootstrap]
    numbers = {"params": N, "tokens": D, "tokens_per_param": D / N,
               "params_interval": interval([n for n, _ in optima]), "tokens_interval": interval([d for _, d in optima]),
               "tokens_per_param_interval": tokens_per_param_interval(laws_bootstrap, C, flops_per_param_token),
               "loss": float(law.loss(N, D)), "loss_interval": loss_interval(laws_bootstrap, N, D)}  # fmt: skip
    return {"flops": float(C)} | marked(numbers, identified)


def marked(numbers: dict, identified: bool) -> dict:
    """An answer of the law where it is identified; where not, its numbers kept under `unidentified_law_numbers`, so
    no reader of fit.json takes them for one."""
    return {"identified": identified} | (numbers if identified else {"unidentified_law_numbers": numbers})


def law_numbers(entry: dict) -> dict:
    """The numbers of a `marked` entry, whether or not they answer anything."""
    return entry.get("unidentified_law_numbers", entry)


def summarize(points: list[dict], budgets=(1e21,), flops_per_param_token: float | None = None, samples: int = 200,
              seed: int = 0, grid: dict | None = None, frontier_steps: int = 25) -> dict:  # fmt: skip
    """Everything fit.json holds: the law fitted on the points not held out, its intervals, whether it is identified,
    Approach 2 beside it, the forecast of the held-out points and what each budget asks for. `params` is the N of
    the fit."""
    budgets = [check_budget(C) for C in budgets]
    fitted = [p for p in points if not p.get("held_out")]
    held_out = [p["run"] for p in points if p.get("held_out")]
    if flops_per_param_token is None:
        k = float(np.median([p["flops"] / (p["params"] * p["tokens"]) for p in points]))
        k_source = "median over the points of flops / (params * tokens)"
    else:
        k, k_source = float(flops_per_param_token), "given"
    law = fit_law(*_arrays(fitted), grid=grid)
    laws = bootstrap(*_arrays(fitted), samples=samples, seed=seed, law=law)
    at_flops = float(max(p["flops"] for p in points))
    approach2 = isoflop_minima(group_by_compute(fitted), k, at_flops)
    intervals = parameter_intervals(laws)
    checked = identification(law, *_arrays(fitted), intervals, approach2)
    intervals = floor_at_bound(law, intervals, _arrays(fitted)[2])
    sizes = sorted({(p["params"], p["params_non_embedding"], p["params_total"]) for p in points})
    n_kind = "non-embedding" if all(n == non_embedding for n, non_embedding, _ in sizes) else (
        "total" if all(n == total for n, _, total in sizes) else "neither non-embedding nor total")  # fmt: skip
    low_C = min(p["flops"] for p in points)
    high_C = max([at_flops, *budgets])
    frontier = [{"flops": float(C), "params": float(law.optimal(C, k)[0]), "tokens": float(law.optimal(C, k)[1]),
                 "params_interval": interval([b.optimal(C, k)[0] for b in laws]),
                 "tokens_interval": interval([b.optimal(C, k)[1] for b in laws])}
                for C in np.geomspace(low_C, high_C, frontier_steps)]  # fmt: skip
    return {
        "n_used": n_kind,
        "note": f"N in the fit is each run's `params`, here the {n_kind} parameter count; D is its training tokens; "
        f"C = k N D with k = {k:.4g} ({k_source}).",
        "flops_per_param_token": k,
        "flops_per_param_token_source": k_source,
        "points_fitted": len(fitted),
        "held_out": held_out,
        "law": law.as_dict(),
        "bootstrap_samples": samples,
        "intervals": intervals,
        "identification": checked,
        "compute_optimal": marked({"a": law.beta / (law.alpha + law.beta), "b": law.alpha / (law.alpha + law.beta),
                                   "at_flops": at_flops, "tokens_per_param": float(law.tokens_per_param(at_flops, k)),
                                   "tokens_per_param_interval": tokens_per_param_interval(laws, at_flops, k)},
                                  checked["identified"]),  # fmt: skip
        "approach2": approach2,
        "disagreement": compare_approaches(law, approach2, k),
        "forecast": forecast(points, held_out, law=law, laws=laws) if held_out else [],
        "budgets": [budget(law, laws, C, k, checked["identified"]) for C in budgets],
        "frontier": marked({"points": frontier}, checked["identified"]),
    }
