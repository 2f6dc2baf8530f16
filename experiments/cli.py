"""The `curate` and `train` commands with the experiments that join both: `curate ablate`, `train ladder`, and
`curate report --training`. The console scripts start here, so curation and training never import each other."""

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from rich.console import Console

from curation import cli as curation_cli
from curation.cli import input_arguments, make_console, positive_int, resolve_inputs

ABLATE_HELP = "curate a recipe and its variants, train the same small model on each, compare them in one report"


def add_ablate_arguments(ablate) -> None:
    ablate.description = (
        "Curates the base recipe and every variant on the same input (a variant reuses the base's stages it "
        "shares), holds out validation documents from the input before curation, tokenizes all with one tokenizer, trains the same model for the same tokens on each with the same seeds (3 by default), "
        "scores every run on every validation document and on multiple-choice benchmarks, and writes each variant's "
        "difference from the base with its 95% interval over seeds and documents to OUT/report.html and "
        "OUT/results.json. A rerun resumes every step."
    )  # fmt: skip
    ablate.add_argument("ablation", nargs="?", help="ablation YAML (base, variants, tokens, model, benchmarks, ...); "
                        "flags override it")  # fmt: skip
    ablate.add_argument("--base", help="base recipe (default fineweb-snapshot)")
    ablate.add_argument("--variant", action="append", default=[], metavar="FILE",
                        help="a variant YAML: `name`, `remove: [stage, ...]`, `set: {stage.param: value}`, or a whole "
                        "recipe; repeatable")  # fmt: skip
    ablate.add_argument("--tokens", type=positive_int, help="training tokens per run (default: 20 per parameter, "
                        "capped so no variant repeats its tokens)")  # fmt: skip
    ablate.add_argument("--model", help="training preset tiny|small|1b or a settings YAML (default tiny)")
    ablate.add_argument("--width", type=positive_int, help="train the cpu ladder rule's model of this width instead of "
                        "--model (shape, fan-in init, peak lr 8e-3 x 64 / width, 5%% warmup; 1 rank per run)")  # fmt: skip
    ablate.add_argument("--ladder", action="store_true", help="also train every variant on the same small ladder "
                        "(IsoFLOP sets of `train ladder`, budgets the smallest variant's data allows): each pair's order at "
                        "every rung, decision accuracy, and the tokens of one variant's data that match another's loss")  # fmt: skip
    ablate.add_argument("--seeds", type=positive_int, help="runs of every variant, base included, seed k paired with "
                        "seed k (default 3, at least 2)")  # fmt: skip
    ablate.add_argument("--benchmark", action="append", default=[], metavar="NAME=FORMAT:PATH",
                        help="a multiple-choice benchmark, local file, e.g. arc=arc:ARC-Easy-Test.jsonl (formats "
                        "hellaswag, arc, mmlu); repeatable")  # fmt: skip
    ablate.add_argument("--out", default="runs/ablation", help="ablation folder (default runs/ablation)")
    input_arguments(ablate)


DECIDE_HELP = "train a ladder of sizes on several data recipes; how often the small sizes' ranking holds at the largest"


def add_decide_arguments(decide) -> None:
    decide.description = (
        "Curates every input the spec names, holds a target set out of the target inputs before curation, tokenizes "
        "all with one tokenizer, trains every data recipe (a weighting of the curated inputs) at every scale (widths "
        "of the ladder preset's shape rule, tokens_per_param tokens per parameter) with its seeds, scores every run "
        "on the target documents and the evaluation sets (accuracy and the right answer's log-probability per "
        "character), and reports per metric and smaller scale the decision accuracy: the share of the pairs resolved "
        "at the largest scale that the smaller scale orders the same way, with a bootstrap interval. Writes "
        "OUT/results.json and OUT/report.html; a rerun resumes every step and retrains nothing finished."
    )  # fmt: skip
    decide.add_argument("decision", help="decision YAML: curated, recipes, target, evals, widths, seeds, ... "
                        "(experiments/decisions/real-text.yaml)")  # fmt: skip
    decide.add_argument("--out", default="runs/decide", help="decision folder (default runs/decide)")
    decide.add_argument("--parallel", type=positive_int, help="runs trained side by side (default 2: one per core)")
    decide.add_argument("--plan", action="store_true", help="print the scales and their cost, curate and train nothing")
    decide.add_argument("--ray-address", help="an existing Ray cluster for the curation (default: a local one)")
    decide.add_argument("--num-cpus", type=positive_int, help="CPUs of the local Ray (default: all)")


def cmd_decide(args) -> int:
    from curation import runner, stats
    from experiments.decide import Decision, load_decision, run_decision

    console = make_console()
    try:
        decision = Decision(load_decision(args.decision, parallel=args.parallel), args.out, log=console.print)
    except (ValueError, OSError) as error:
        print(f"curate decide: {error}", file=sys.stderr)
        return 2
    if args.plan:
        return _print_decision_plan(decision, console)

    def curate(recipe, inputs: list[str], output: str, snapshot: str) -> None:
        result = runner.run(recipe, inputs, output, snapshot, ray_address=args.ray_address, num_cpus=args.num_cpus)
        if result.failures:
            raise RuntimeError(f"curating {recipe.name}: {len(result.failures)} shard(s) failed, e.g. {result.failures[0].error}")
        stats.print_funnel(stats.stage_totals(output), console)

    results, code = _resumable("curate decide", f"runs are kept in {args.out}", lambda: run_decision(decision, curate))
    if code:
        return code
    _print_decision(results, console)
    console.print(f"report: {Path(args.out) / 'report.html'} ({results['wall_seconds']:.0f} s)")
    return 0


def _resumable(command: str, kept: str, work):
    """(work's result, 0); or (None, 1) after its error in one line; or (None, 130) on Ctrl-C, saying how to resume."""
    try:
        return work(), 0
    except (RuntimeError, ValueError, OSError) as error:
        print(f"{command}: {error}", file=sys.stderr)
        return None, 1
    except KeyboardInterrupt:
        print(f"{command}: stopped; rerun the same command to resume (finished {kept})", file=sys.stderr)
        return None, 130


def _print_decision_plan(decision, console: Console) -> int:
    """The scales with their cost, then the plan's checks; 1 when one failed."""
    from experiments.plan_checks import decision_checks, decision_rungs

    spec, rungs = decision.spec, decision_rungs(decision)
    for (width, rung), seeds in zip(rungs.items(), spec.seeds):
        console.print(f"w{width}: {rung.params_total:,} params (at {spec.vocab_size:,} tokens), {rung.tokens:,} tokens, "
                      f"{rung.flops:.2e} FLOPs, {seeds} seeds x {len(spec.recipes)} recipes")  # fmt: skip
    flops = [rung.flops for rung in rungs.values()]
    total = sum(f * s for f, s in zip(flops, spec.seeds)) * len(spec.recipes)
    console.print(f"{flops[-1] / flops[0]:.3g}x compute from the smallest scale to the largest; {total:.2e} FLOPs in all")
    return _print_checks(decision_checks(decision, rungs), console)


def _print_decision(results: dict, console: Console) -> None:
    from experiments.decide_report import accuracy_table, deciding_line, forecast_table, search_line, target_line, value_table
    from experiments.decision_accuracy import TRUTHS

    console.print("target loss per recipe and scale (mean over seeds, 95% interval):")
    console.print(value_table(results).to_string(), markup=False)
    console.print("decision accuracy against the target loss at the largest scale:")
    console.print(accuracy_table(results, "against_target_loss").to_string(), markup=False)
    forecast = forecast_table(results)
    if forecast is None:
        console.print(results["forecasts"]["why"], markup=False)
    else:
        console.print("forecast of the largest scale from the smaller ones (95% interval over seeds):")
        console.print(forecast.to_string(), markup=False)
    console.print(f"target: {results['target']['documents']:,} documents; {target_line(results['target'])}", markup=False)
    console.print(deciding_line(results), markup=False)
    for truth, title in TRUTHS.items():
        console.print(search_line(results["metric_search"][truth], title), markup=False)


def add_report_arguments(report) -> None:
    report.add_argument("--training", metavar="TRAIN_OUT", help="also a training run's figures (the --out of `train`)")
    report.description = "A curation run's figures (plus a training run's with --training); given a `train ladder` " \
        "folder, the ladder's: loss against FLOPs, IsoFLOP curves, the fitted law, the compute-optimal frontier, the " \
        "forecast; given a `curate decide` folder, its decision-accuracy curves, the recipes' ladders and forecasts."


def cmd_report(args) -> int:
    """A curation run's report (with a training run's figures), or a ladder folder's (it has fit.json)."""
    decided = Path(args.output) / "results.json"
    if decided.is_file() and (Path(args.output) / "decision.json").is_file():
        import json

        from curation.io import write_text_atomic
        from experiments.folders import LOCAL
        from experiments.decide_report import render

        target = str(args.html or Path(args.output) / "report.html")
        write_text_atomic(LOCAL, target, render(json.loads(decided.read_text())))
        print(f"report: {target}")
        return 0
    fit = Path(args.output) / "fit.json"
    if fit.is_file():
        import json

        from curation.io import write_text_atomic
        from experiments.folders import LOCAL
        from experiments.ladder import report_html

        target = str(args.html or Path(args.output) / "report.html")
        write_text_atomic(LOCAL, target, report_html(json.loads(fit.read_text())))
        print(f"report: {target}")
        return 0
    if args.training:
        from training import plots

        args.also = [(f"Training run {args.training}", args.training, plots.SECTIONS)]
    return curation_cli.cmd_report(args)


def cmd_ablate(args) -> int:
    from curation import runner, stats
    from curation.recipe import RecipeError, load_recipe
    from experiments.ablation import Ablation, load_ablation, load_variant, run_ablation

    console = make_console()
    try:
        variants = [load_variant(path) for path in args.variant] or None
        benchmarks = [_benchmark_argument(text) for text in args.benchmark] or None
        spec = load_ablation(args.ablation, base=args.base, variants=variants, tokens=args.tokens, model=args.model,
                             width=args.width, seeds=args.seeds, benchmarks=benchmarks, ladder=args.ladder or None)  # fmt: skip
        inputs, snapshot = resolve_inputs(args, console, load_recipe(spec.base).source.kind)
        ablation = Ablation(spec, args.out, inputs, snapshot, log=console.print)
    except (RecipeError, ValueError, OSError) as error:
        print(f"curate: {error}", file=sys.stderr)
        return 2

    def curate(recipe, inputs: list[str], output: str, snapshot: str) -> None:
        # every stage's parts are the ablation's inputs: kept, unredacted, in its own experiment folder
        result = runner.run(recipe, inputs, output, snapshot, materialize_all=True, keep_intermediate=True,
                            ray_address=args.ray_address, num_cpus=args.num_cpus)  # fmt: skip
        if result.failures:
            raise RuntimeError(f"curating {recipe.name}: {len(result.failures)} shard(s) failed, e.g. {result.failures[0].error}")
        if result.skipped_shards:
            console.print(f"resumed: {result.skipped_shards} stage-shard(s) were already done and skipped")
        stats.print_funnel(stats.stage_totals(output), console)

    try:
        results = run_ablation(ablation, curate)
    except (RecipeError, RuntimeError, ValueError) as error:
        print(f"curate: {error}", file=sys.stderr)
        return 1
    _print_ablation(results, console)
    console.print(f"report: {Path(args.out) / 'report.html'} ({results['wall_seconds']:.0f} s)")
    return 0


def _benchmark_argument(text: str) -> dict:
    name, _, rest = text.partition("=")
    form, _, path = rest.partition(":")
    if not (name and form and path):
        raise ValueError(f"--benchmark {text!r}: give NAME=FORMAT:PATH, e.g. arc=arc:ARC-Easy-Test.jsonl")
    return {"name": name, "format": form, "path": path}


def _print_ablation(results: dict, console: Console) -> None:
    from rich.table import Table

    from experiments.ablation_report import comparison_table

    frame = comparison_table(results)
    table = Table(title=f"Ablation: {results['budget']['tokens']:,} tokens per run, seeds {results['seeds']}; "
                        f"differences from the base with 95% intervals; {results['deciding_slice']} decides")  # fmt: skip
    table.add_column("variant")  # a column per variant: a row per figure fits a terminal's width
    for name in frame.index:
        table.add_column(str(name), justify="right")
    for figure, values in frame.T.iterrows():
        table.add_row(str(figure), *(f"{value:.4f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int)
                                     else str(value) for value in values))  # fmt: skip
    console.print(table)
    if results.get("ladder"):
        from experiments.ablation_report import ladder_table

        console.print(ladder_table(results["ladder"]).to_string(float_format=lambda value: f"{value:.3g}"))
    if results.get("data_scaling"):
        from experiments.ablation_report import data_scaling_lines

        console.print("\n".join(data_scaling_lines(results["data_scaling"])), markup=False)


def add_reference_arguments(reference) -> None:
    reference.description = ("Writes docs/reference/stages.md (every stage's recipe parameters and columns) and "
                             "docs/reference/cli.md (every command's --help) from the code.")  # fmt: skip
    reference.add_argument("--out", type=Path, help="folder to write into (default: docs/reference of this checkout)")
    reference.add_argument("--check", action="store_true", help="write nothing; exit 1 when a committed page differs")


def cmd_reference(args) -> int:
    from experiments import reference

    folder = args.out or reference.FOLDER
    pages = reference.pages(CURATE_COMMANDS, train_main)
    if args.check:
        differing = reference.stale(pages, folder)
        for name in differing:
            print(f"{folder / name} differs from what the code writes: run `curate reference`")
        return 1 if differing else 0
    for path in reference.write(pages, folder):
        print(f"wrote {path}")
    return 0


CURATE_COMMANDS = {"ablate": (ABLATE_HELP, add_ablate_arguments, cmd_ablate),
                   "decide": (DECIDE_HELP, add_decide_arguments, cmd_decide), "report": ("", add_report_arguments, cmd_report),
                   "reference": ("write docs/reference/ (stages' parameters, every command's --help) from the code",
                                 add_reference_arguments, cmd_reference)}


def curate_main(argv: list[str] | None = None) -> int:
    return curation_cli.main(argv, CURATE_COMMANDS)


def curate_script() -> NoReturn:
    """The `curate` command (its process ends as curation.cli.exit_script says)."""
    curation_cli.exit_script(curate_main())


def _numbers(text: str) -> list[float]:
    try:
        return [float(value) for value in text.split(",") if value.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def _ladder_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="train ladder",
        description="Train a model ladder on a mixture: IsoFLOP sets (every width at every compute budget; a width's "
        "depth and heads by one shape rule), each rung a `train` run scored on the mixture's held-out documents; fit "
        "Chinchilla's law L = E + A/N^alpha + B/D^beta (Approach 3, as Besiroglu et al. 2024 refit it, with bootstrap "
        "intervals) and the IsoFLOP parabolas (Approach 2) as a cross-check, after adding widths past a set's smallest or "
        "largest where its lowest loss is there (`bracket`), and say whether the law is identified; then forecast one larger held-out rung "
        "(the fitted compute-optimal size at holdout_factor x the largest budget) before training it and report the "
        "error. N is counted both ways (total, non-embedding). Writes OUT/fit.json and OUT/report.html; a rerun skips "
        "finished rungs and resumes a killed one from its checkpoint.",
    )
    parser.add_argument("ladder", nargs="?", default="cpu", help="a ladder YAML of LadderSpec fields, or a preset: cpu (the "
                        "default: widths 24-64, budgets 5e11-2e12 FLOPs, ~20 min on 2 cores) or gpu (widths 512-1536, "
                        "budgets 2e18-2e19); flags override it")  # fmt: skip
    parser.add_argument("--mixture", help="mixture YAML (the cpu preset's data: mixtures/ladder_code.yaml)")
    parser.add_argument("--out", default="runs/ladder", help="ladder folder (default runs/ladder)")
    parser.add_argument("--widths", type=_numbers, help="model widths, e.g. 24,32,48,64 (at least 4)")
    parser.add_argument("--budgets", type=_numbers, help="IsoFLOP compute budgets in FLOPs, e.g. 5e11,1e12,2e12 (at least 3)")
    parser.add_argument("--holdout-factor", type=float, dest="holdout_factor", help="held-out rung's compute over the largest budget")
    parser.add_argument("--parallel", type=positive_int, help="rungs trained side by side (default 2: one per core)")
    parser.add_argument("--ranks", type=positive_int, help="processes per rung (default 1)")
    parser.add_argument("--count", choices=["total", "non_embedding"], help="the N of the forecast and headline (default total)")
    parser.add_argument("--budget", type=float, action="append", dest="budget_queries",
                        help="a compute budget to answer (N, D, tokens per parameter, expected loss), e.g. 1e21; repeatable")  # fmt: skip
    parser.add_argument("--plan", action="store_true", help="print the rungs, their cost and the checks of their budgets, data "
                        "and preset range (exit 1 when one fails), train nothing; works before the data is built")  # fmt: skip
    parser.add_argument("--vocab-size", type=positive_int, default=2048, help="with --plan before the mixture's data is "
                        "built: the vocabulary to plan with (default 2048, the cpu ladder's); then its tokenizer's")  # fmt: skip
    return parser


def cmd_ladder(argv: list[str]) -> int:
    from experiments.ladder import Ladder, load_ladder, run_ladder

    args = _ladder_parser().parse_args(argv)
    console = make_console()
    try:
        widths = [int(width) for width in args.widths] if args.widths else None
        spec = load_ladder(args.ladder, mixture=args.mixture, widths=widths, budgets=args.budgets, count=args.count,
                           holdout_factor=args.holdout_factor, parallel=args.parallel, ranks=args.ranks,
                           budget_queries=args.budget_queries)  # fmt: skip
        ladder = Ladder(spec, args.out, log=console.print, assumed_vocab=args.vocab_size if args.plan else None)
    except (ValueError, FileNotFoundError) as error:
        print(f"train ladder: {error}", file=sys.stderr)
        return 2
    if args.plan:
        from experiments.plan_checks import ladder_checks, ladder_preset

        _print_rungs(ladder, console)
        return _print_checks(ladder_checks(ladder, ladder_preset(args.ladder, spec.ranks)), console)
    summary, code = _resumable("train ladder", f"rungs are kept in {args.out}/results", lambda: run_ladder(ladder))
    if code:
        return code
    _print_fit(summary, console)
    console.print(f"fit: {Path(args.out) / 'fit.json'}, report: {Path(args.out) / 'report.html'} ({summary['wall_seconds']:.0f} s)")
    return 0


def _print_rungs(ladder, console: Console) -> None:
    from rich.table import Table

    from experiments.ladder import GPU_MFU, GPU_PEAK_FLOPS, shape

    if not ladder.data_built:
        console.print(f"vocabulary {ladder.vocab:,} assumed: the mixture's data is not built yet (--vocab-size to plan another)")
    table = Table(title=f"Ladder on {ladder.spec.mixture}: {len(ladder.rungs)} rungs plus one held-out rung at "
                        f"{ladder.spec.holdout_factor:g} x {max(ladder.spec.budgets):.2g} FLOPs (its size chosen by the fit)")  # fmt: skip
    for column in ("rung", "width", "layers", "N total", "N non-embedding", "tokens", "tokens/param", "FLOPs"):
        table.add_column(column, justify="left" if column == "rung" else "right")
    for rung in ladder.rungs:
        table.add_row(rung.name, str(rung.width), str(shape(ladder.spec, rung.width)["n_layers"]), f"{rung.params_total:,}",
                      f"{rung.params_non_embedding:,}", f"{rung.tokens:,}", f"{rung.tokens / rung.params_total:.1f}",
                      f"{rung.flops:.2e}")  # fmt: skip
    console.print(table)
    flops = sum(rung.flops for rung in ladder.rungs) + ladder.spec.holdout_factor * max(ladder.spec.budgets)
    console.print(f"{flops:.2e} FLOPs in all: {flops / (GPU_PEAK_FLOPS * GPU_MFU) / 3600:.2g} GPU-hours on H100s at "
                  f"{GPU_MFU:.0%} MFU (dense bf16 peak {GPU_PEAK_FLOPS:.3g} FLOP/s)")  # fmt: skip
    if ladder.spec.bracket:
        console.print(f"Extra rungs may be added: up to {ladder.spec.bracket} more widths per budget (x or / 1.5, in "
                      "8s) while its lowest loss is at its smallest or largest width; not in the count above")  # fmt: skip


def _print_checks(checks, console: Console) -> int:
    """A plan's checks, one line each; 1 when one failed (as `train plan`), else 0."""
    for check in checks:
        console.print(check.line(), markup=False, soft_wrap=True, style="red" if check.status == "problem" else None)
    return int(any(check.status == "problem" for check in checks))


def _print_fit(summary: dict, console: Console) -> None:
    for line in fit_lines(summary):
        console.print(line, markup=False)


def fit_lines(summary: dict) -> list[str]:
    """The fitted law with its intervals, the budgets it answers (none, in one line that says why, when it is not
    identified) and the held-out rung's forecast."""
    from experiments.ladder import forecast_caveat
    from experiments.ladder_report import interval_text
    from experiments.scaling_fit import not_identified

    fit = summary["fits"][summary["count"]]
    law, intervals = fit["law"], fit["intervals"]
    lines = [f"fitted law (N = {summary['count']} parameters): L = E + A/N^alpha + B/D^beta"]
    lines += [f"  {name:5s} {law[name]:.4g}  95% {interval_text(intervals[name])}" for name in ("E", "A", "alpha", "B", "beta")]
    verdict = not_identified(fit["identification"])
    if verdict:
        budgets = ", ".join(f"{row['flops']:.3g}" for row in fit["budgets"])
        lines.append(f"the law is {verdict}. Budgets {budgets} FLOPs not answered (fit.json keeps their numbers under "
                     "unidentified_law_numbers)")  # fmt: skip
    else:
        lines += [f"budget {row['flops']:.3g} FLOPs: N {row['params']:.4g} {interval_text(row['params_interval'])}, "
                  f"D {row['tokens']:.4g} {interval_text(row['tokens_interval'])}, {row['tokens_per_param']:.4g} tokens "
                  f"per parameter {interval_text(row['tokens_per_param_interval'])}, loss {row['loss']:.4f} "
                  f"{interval_text(row['loss_interval'])}" for row in fit["budgets"]]  # fmt: skip
    forecast = summary["forecast"]
    if forecast is not None:
        low, high = forecast["interval"]
        lines.append(f"held-out rung {forecast['run']}: forecast {forecast['predicted_loss']:.4f} [{low:.4f}, {high:.4f}], "
                     f"measured {forecast['measured_loss']:.4f}: error {forecast['relative_error']:+.2%}{forecast_caveat(forecast)}")  # fmt: skip
    return lines


def train_main(argv: list[str] | None = None) -> int:
    from training import cli as training_cli

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ladder"]:
        return cmd_ladder(argv[1:])
    return training_cli.main(argv)
