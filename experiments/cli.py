"""The `curate` and `train` commands with the experiments that join both: `curate ablate`, `train ladder`, and
`curate report --training`. The console scripts start here, so curation and training never import each other."""

import sys
from pathlib import Path

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
    ablate.add_argument("--seeds", type=positive_int, help="runs of every variant, base included, seed k paired with "
                        "seed k (default 3, at least 2)")  # fmt: skip
    ablate.add_argument("--benchmark", action="append", default=[], metavar="NAME=FORMAT:PATH",
                        help="a multiple-choice benchmark, local file, e.g. arc=arc:ARC-Easy-Test.jsonl (formats "
                        "hellaswag, arc, mmlu); repeatable")  # fmt: skip
    ablate.add_argument("--out", default="runs/ablation", help="ablation folder (default runs/ablation)")
    input_arguments(ablate)


def add_report_arguments(report) -> None:
    report.add_argument("--training", metavar="TRAIN_OUT", help="also a training run's figures (the --out of `train`)")


def cmd_report(args) -> int:
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
                             seeds=args.seeds, benchmarks=benchmarks)  # fmt: skip
        inputs, snapshot = resolve_inputs(args, console, load_recipe(spec.base).source.kind)
        ablation = Ablation(spec, args.out, inputs, snapshot, log=console.print)
    except (RecipeError, ValueError, OSError) as error:
        print(f"curate: {error}", file=sys.stderr)
        return 2

    def curate(recipe, inputs: list[str], output: str, snapshot: str) -> None:
        result = runner.run(recipe, inputs, output, snapshot, materialize_all=True, ray_address=args.ray_address,
                            num_cpus=args.num_cpus)  # fmt: skip
        if result.failures:
            raise RuntimeError(f"curating {recipe.name}: {len(result.failures)} shard(s) failed, e.g. {result.failures[0].error}")
        if result.skipped_shards:
            console.print(f"resumed: {result.skipped_shards} stage-shard(s) were already done and skipped")
        stats.print_funnel(stats.load(output), console)

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



CURATE_COMMANDS = {"ablate": (ABLATE_HELP, add_ablate_arguments, cmd_ablate), "report": ("", add_report_arguments, cmd_report)}


def curate_main(argv: list[str] | None = None) -> int:
    return curation_cli.main(argv, CURATE_COMMANDS)


def train_main(argv: list[str] | None = None) -> int:
    from training import cli as training_cli

    return training_cli.main(argv)
