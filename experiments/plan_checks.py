"""The checks under a plan's table (`train ladder --plan`, `curate decide --plan`), one line each, made before anything
trains: its budgets (a budget the plan cannot use: one under half a training step, which the rung's one-step minimum
replaces, or a budget to answer past any training run), its data (the tokens each rung asks of every source against
the tokens there at its max_epochs, as `train plan --mixture` checks them; not checked while the data is not built)
and its preset's range (its largest model, and the time its compute takes on the machine the preset is meant for). A
plan with a problem exits 1, as `train plan` does."""

from dataclasses import dataclass

from experiments.ablation import read_token_stats, tokens_done
from experiments.ladder import GPU_MFU, GPU_PEAK_FLOPS, PRESETS, Ladder, Rung, make_rung
from training.plan import SourcePlan, asked_tokens, over_cap

OK, PROBLEM, NOT_CHECKED = "ok", "problem", "not checked"
SANE_FLOPS = 1e28  # ~100x the largest training runs reported to date (~1e26 FLOPs): a budget past it is a slip
SHOWN = 3  # rungs or widths named in a line; the others counted


@dataclass(frozen=True)
class PresetRange:
    """What a ladder preset is meant for: the speed its plans are timed at, on what, and the longest plan it suits."""

    flops_per_second: float
    machine: str
    max_seconds: float
    max_params: float  # the largest model: its training state (fp32 weights, gradients, AdamW's moments) 16 bytes each


PRESET_RANGES = {
    # the cpu ladder trained 1.8e13 FLOPs of rungs in 2,349 s on the 2-core dev machine (docs/benchmarks.md)
    "cpu": PresetRange(7.7e9, "2 CPU cores", 24 * 3600.0, 1e8),
    "gpu": PresetRange(GPU_PEAK_FLOPS * GPU_MFU, "one H100 at 40% MFU", 1000 * 3600.0, 1e10),
}


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK, PROBLEM or NOT_CHECKED
    text: str

    def line(self) -> str:
        return f"{self.name}: {self.status}: {self.text}"


def duration(seconds: float) -> str:
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            value = f"{seconds / size:.2g}"
            return f"{value} {unit.removesuffix('s') if value == '1' else unit}"
    return f"{seconds:.0f} s"


def named(names: list[str]) -> str:
    return ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def capped_budgets(rungs: list[Rung]) -> dict[float, list[Rung]]:
    """Per budget the rungs it asks less than half a step of: each trains its one-step minimum instead, so the budget
    changes nothing there (two such budgets train the same rungs)."""
    capped: dict[float, list[Rung]] = {}
    for rung in rungs:
        if rung.steps == 1 and rung.budget < rung.flops / 2:
            capped.setdefault(rung.budget, []).append(rung)
    return capped


def budget_check(rungs: list[Rung], queries: list[float]) -> Check:
    """The rungs' budgets each trained as asked, and the budgets to answer (`--budget`) short of SANE_FLOPS; when they
    are, how far the answers extrapolate past the largest rung."""
    problems = []
    capped = capped_budgets(rungs)
    if capped:
        widths = sorted({rung.width for rungs_capped in capped.values() for rung in rungs_capped})
        floor = max(rung.flops for rungs_capped in capped.values() for rung in rungs_capped)
        problems.append(f"{', '.join(f'{budget:.3g}' for budget in capped)} FLOPs ask less than half a step of "
                        f"{named([f'w{width}' for width in widths])}: their one-step minimum (up to {floor:.2g} FLOPs) "
                        f"trains instead, so those budgets change nothing there; raise them to at least {floor:.2g} "
                        "FLOPs or leave those widths out")  # fmt: skip
    past = [query for query in queries if query > SANE_FLOPS]
    if past:
        problems.append(f"--budget {', '.join(f'{query:.3g}' for query in past)} FLOPs is past {SANE_FLOPS:.0e}, ~100x "
                        "the largest training run to date, where no ladder's law says anything: ask a budget one could "
                        "spend")  # fmt: skip
    if problems:
        return Check("budgets", PROBLEM, "; ".join(problems))
    budgets = sorted({rung.budget for rung in rungs})
    text = f"{len(budgets)} budgets, {budgets[0]:.3g} to {budgets[-1]:.3g} FLOPs, each trained as asked"
    if queries:
        largest = max(rung.flops for rung in rungs)
        text += (f"; answers {', '.join(f'{query:.3g}' for query in queries)} FLOPs, up to {max(queries) / largest:.2g}x "
                 f"the largest rung ({largest:.2g} FLOPs): the fitted law is extrapolated that far")  # fmt: skip
    return Check("budgets", OK, text)


def data_check(rungs: list[tuple[str, list[SourcePlan]]]) -> Check:
    """Every rung's sources (name -> training.plan's SourcePlan per source) within their max_epochs."""
    worst = max(rungs, key=lambda rung: max(source.epochs / source.max_epochs for source in rung[1]))
    over = [name for name, sources in rungs if over_cap(sources)]
    if over:
        return Check("data", PROBLEM, f"{len(over)} of {len(rungs)} rungs repeat their data past max_epochs "
                     f"({named(over)}); the most, {worst[0]}: {over_cap(worst[1])}")  # fmt: skip
    asks = ", ".join(f"{source.asked:,} of the {source.available:,} tokens of {source.name!r} ({source.epochs:.2f} "
                     f"epochs, max_epochs {source.max_epochs:g})" for source in worst[1])  # fmt: skip
    return Check("data", OK, f"every rung within its sources' max_epochs; the most, {worst[0]}, asks {asks}")


def unbuilt_data_check(asks: list[tuple[str, str, float]], where: str) -> Check:
    """What a plan's data must hold while it is not built: per source, the training tokens its most demanding rung
    needs. `asks`: (rung, source, the tokens the rung asks of the source over the source's max_epochs)."""
    needs: dict[str, tuple[float, str]] = {}
    for rung, name, tokens in asks:
        if tokens > needs.get(name, (0.0, ""))[0]:
            needs[name] = (tokens, rung)
    listed = "; ".join(f"{tokens:,.0f} training tokens of {name!r} ({rung})" for name, (tokens, rung) in needs.items())
    return Check("data", NOT_CHECKED, f"data not built yet ({where}); at max_epochs it needs at least {listed}")


def range_check(preset: str, limits: PresetRange, width_flops: dict[int, tuple[int, float]], unplaced: float = 0.0) -> Check:
    """The plan's models and compute (width -> (parameters, FLOPs of its runs), plus `unplaced` FLOPs of runs whose
    width the plan leaves open) against what the preset is meant for: the largest model, and the time the compute
    takes on the preset's machine."""
    speed = limits.flops_per_second
    total = sum(flops for _, flops in width_flops.values()) + unplaced
    timed = f"{total:.2g} FLOPs take ~{duration(total / speed)} on {limits.machine} (~{speed:.2g} FLOP/s)"
    problems = []
    if total / speed > limits.max_seconds:
        heaviest = max(width_flops, key=lambda width: width_flops[width][1])
        problems.append(f"{timed}, past the {duration(limits.max_seconds)} the {preset} preset is meant for (w{heaviest} "
                        f"alone ~{duration(width_flops[heaviest][1] / speed)})")  # fmt: skip
    large = [width for width, (params, _) in width_flops.items() if params > limits.max_params]
    if large:
        params = max(width_flops[width][0] for width in large)
        problems.append(f"{named([f'w{width}' for width in large])} ha{'s' if len(large) == 1 else 've'} up to {params:.2g} "
                        f"parameters ({16 * params / 1e9:.3g} GB of training state), past the {limits.max_params:.0e} the "
                        f"{preset} preset is meant for")  # fmt: skip
    if problems:
        way_out = "lower the widths or the budgets" + (", or plan for the gpu preset" if preset == "cpu" else "")
        return Check("range", PROBLEM, f"{'; '.join(problems)}: {way_out}")
    largest = max(params for params, _ in width_flops.values())
    return Check("range", OK, f"{timed}, within the {duration(limits.max_seconds)} the {preset} preset is meant for; "
                 f"models up to {largest:.2g} parameters, within its {limits.max_params:.0e}")  # fmt: skip


def ladder_preset(name: str | None, ranks: int | None) -> str:
    """The preset whose range a ladder is checked against: the one it was given by name; a ladder YAML by where its
    rungs run: on every GPU (ranks none) the gpu preset's, on a count of processes the cpu preset's."""
    if name in PRESETS:
        return name
    return "gpu" if ranks is None else "cpu"


def ladder_checks(ladder: Ladder, preset: str) -> list[Check]:
    """A ladder's IsoFLOP rungs against its budgets, its data and its preset's range (the held-out rung's size is the
    fit's to choose: its data is checked then)."""
    rungs, spec = ladder.rungs, ladder.spec
    if ladder.data_built:
        data = data_check([(rung.name, ladder.source_plans(rung)) for rung in rungs])
    else:
        asks = [(rung.name, name, tokens / ladder.mixture.sources[name].max_epochs)
                for rung in rungs for name, tokens in asked_tokens(ladder.mixture, [rung.tokens]).items()]  # fmt: skip
        paths = ", ".join(path for source in ladder.mixture.sources.values() for path in source.paths)
        data = unbuilt_data_check(asks, f"no token shards or tokenizer at {paths}")
    width_flops = {rung.width: (rung.params_total, sum(r.flops for r in rungs if r.width == rung.width)) for rung in rungs}
    held_out = spec.holdout_factor * max(spec.budgets)
    return [budget_check(rungs, spec.budget_queries), data,
            range_check(preset, PRESET_RANGES[preset], width_flops, held_out)]


def decision_rungs(decision) -> dict[int, Rung]:
    """Each scale's rung (width -> Rung) as `curate decide` trains it, at the spec's vocabulary."""
    spec, ladder_spec = decision.spec, decision.ladder_spec
    return {width: make_rung(ladder_spec, width, decision.budget(ladder_spec, width, spec.vocab_size), spec.vocab_size)
            for width in spec.widths}  # fmt: skip


def training_counts(token_stats: dict) -> dict[str, int]:
    """What a curated run's training rows hold (SourcePlan's documents, available, held_out), from its
    tokens/stats.json."""
    sources = token_stats["sources"].values()
    return {"documents": sum(s["documents"] - s["validation_documents"] for s in sources),
            "available": sum(s["tokens"] - s["validation_tokens"] for s in sources),
            "held_out": sum(s["validation_tokens"] for s in sources)}  # fmt: skip


def decision_checks(decision, rungs: dict[int, Rung]) -> list[Check]:
    """A decision's scales (`decision_rungs`) against their budgets, the curated data every recipe asks of (counted
    from OUT/curated/<name>/tokens/stats.json once curated) and the ladder preset's range."""
    spec = decision.spec
    shares = {recipe: {name: weight / sum(weights.values()) for name, weight in weights.items()}
              for recipe, weights in spec.recipes.items()}  # fmt: skip
    if all(tokens_done(decision.curated(name)) for name in spec.curated):
        counts = {name: training_counts(read_token_stats(decision.curated(name))) for name in spec.curated}
        data = data_check([(f"{recipe} w{width}", [SourcePlan(name, asked=round(rung.tokens * share),
                                                              max_epochs=spec.max_epochs, **counts[name])
                                                   for name, share in by_name.items()])
                           for recipe, by_name in shares.items() for width, rung in rungs.items()])  # fmt: skip
    else:
        asks = [(f"{recipe} w{width}", name, rung.tokens * share / spec.max_epochs)
                for recipe, by_name in shares.items() for width, rung in rungs.items()
                for name, share in by_name.items()]  # fmt: skip
        data = unbuilt_data_check(asks, f"curated into {decision.out / 'curated'} when it runs")
    width_flops = {width: (rung.params_total, rung.flops * seeds * len(spec.recipes))
                   for (width, rung), seeds in zip(rungs.items(), spec.seeds)}  # fmt: skip
    return [budget_check(list(rungs.values()), []), data, range_check(spec.ladder, PRESET_RANGES[spec.ladder], width_flops)]
