"""`train`: validate the mixture and config, then run under torchrun (launching it when not already under it)."""

import argparse
import os
import sys
import textwrap
from pathlib import Path

import torch

from training import fp8, run_lock, storage
from training.attention import KERNELS
from training.config import PP_SCHEDULES, PRESETS
from training.metrics import SPIKE_POLICIES


COMMANDS = """commands, each with its own --help:
  train plan     before training: what a mixture asks of each source (--mixture), or memory per GPU (--gpus)
  train export   a checkpoint as a Hugging Face Llama model (safetensors, config, tokenizer)
  train ladder   a model ladder on a mixture: IsoFLOP runs, a scaling-law fit, a forecast it then checks"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="train",
        description=textwrap.fill("Train a Llama-style decoder with FSDP2 (+ BF16 and FlashAttention on GPUs) on curated "
        "token shards, mixed as a mixture YAML says. Run as is, it launches itself under torchrun on this machine (CUDA "
        "GPUs, else 2 CPU ranks with gloo); on many nodes launch it yourself: torchrun --nnodes N ... -m training "
        "--mixture .... `train plan --mixture FILE` shows what the mixture asks of each source first.", 100),
        epilog=COMMANDS,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the epilog's one line per command, as written
    )
    parser.add_argument("--mixture", required=True, help="mixture YAML, e.g. mixtures/web70_code20.yaml")
    parser.add_argument("--config", default="tiny", help=f"preset {'|'.join(PRESETS)}, or a YAML file of training settings")
    parser.add_argument("--steps", type=int, help="optimizer steps (overrides the config)")
    parser.add_argument("--out", default="runs/train", help="run folder: metrics.jsonl, checkpoints/, lineage.jsonl")
    parser.add_argument("--resume", action="store_true", help="continue from the latest complete checkpoint in --out")
    parser.add_argument("--ranks", type=int, help="processes to launch on this machine (default: GPUs, else 2)")
    parser.add_argument("--max-restarts", type=int, default=0, dest="max_restarts",
                        help="when a rank dies without saying why (killed, a crash), start every rank again from the last "
                        "complete checkpoint, up to N times (default 0); a reported error (a full disk) is not retried. Under a "
                        "torchrun you start yourself, give torchrun --max-restarts N and train --resume instead (README)")  # fmt: skip
    parser.add_argument("--seq-len", type=int, dest="seq_len")
    parser.add_argument("--global-batch", type=int, dest="global_batch", help="sequences per step over all ranks")
    parser.add_argument("--micro-batch", type=int, dest="micro_batch", help="sequences per rank per forward")
    parser.add_argument("--lr", type=float)
    parser.add_argument("--dtype", choices=["auto", "bf16", "fp32"])
    parser.add_argument("--attention", choices=list(KERNELS),
                        help="auto: flash-attn when installed on CUDA in bf16, else SDPA; sdpa-flash/cudnn/efficient/math pin "
                        "SDPA's kernel (sdpa-flash and sdpa-cudnn are FlashAttention inside PyTorch); the log names the choice")  # fmt: skip
    parser.add_argument("--checkpoint-every", type=int, dest="checkpoint_every")
    parser.add_argument("--lineage-every", type=int, dest="lineage_every", help="write every N-th batch's document ids")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--eval-every", type=int, dest="eval_every",
                        help="validation loss, total and per source, on the held-out slice every N steps (0: never)")
    parser.add_argument("--eval-sequences", type=int, dest="eval_sequences", help="held-out sequences scored per source")
    parser.add_argument("--spike-policy", choices=SPIKE_POLICIES, dest="spike_policy",
                        help="on a loss spike: log its documents, skip the update, or rewind to the last checkpoint and "
                        "never train on the offending documents again")  # fmt: skip
    parser.add_argument("--z-loss", type=float, dest="z_loss", help="z-loss weight, e.g. 1e-4 (0: off)")
    parser.add_argument("--average-last", type=float, dest="average_last",
                        help="end with the mean of the weights over this fraction of the last steps, e.g. 0.2 (0: off)")
    parser.add_argument("--optimizer", choices=["adamw", "muon"],
                        help="muon: Muon for the blocks' matrices, AdamW for the rest, on the same lr schedule (default adamw)")
    parser.add_argument("--offload", action="store_true", default=None,
                        help="keep parameters, gradients and optimizer state in CPU memory between uses (FSDP2 CPU offload)")
    parser.add_argument("--fp8", choices=fp8.RECIPES,
                        help="float8 matmuls in the blocks (torchao; GPUs with compute capability 8.9+: H100/H200); "
                        "refused in one line elsewhere")  # fmt: skip
    parser.add_argument("--shuffle-sequences", action="store_true", default=None, dest="shuffle_sequences",
                        help="take each epoch's sequences in a shuffled order, so a batch mixes documents instead of "
                        "the consecutive windows of one long file (small runs are far less noisy; one sequence length)")  # fmt: skip
    layout = parser.add_argument_group("parallelism", "how the ranks split the work (sizes multiply to --ranks, which "
                                       "defaults to their product; see README: Parallelism)")  # fmt: skip
    layout.add_argument("--dp-replicate", type=int, dest="dp_replicate", help="data-parallel replicas (HSDP with --dp-shard)")
    layout.add_argument("--dp-shard", type=int, dest="dp_shard", help="FSDP2 shards per replica (-1: the ranks left over)")
    layout.add_argument("--tp", type=int, help="tensor parallel + sequence parallel degree (inside a node)")
    layout.add_argument("--pp", type=int, help="pipeline stages")
    layout.add_argument("--pp-schedule", choices=PP_SCHEDULES, dest="pp_schedule", help="pipeline schedule")
    layout.add_argument("--pp-microbatches", type=int, dest="pp_microbatches", help="micro-batches per pipeline step")
    layout.add_argument("--cp", type=int, help="context parallel degree (CUDA only)")
    layout.add_argument("--ep", type=int, help="expert parallel degree for MoE models (divides --dp-shard and the experts)")
    return parser


def _plan_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="train plan",
        description="Two plans before any GPU time is spent. With --mixture, the data plan: resolve a mixture against the "
        "token shards: tokens available per source (and bucket), tokens each phase asks (by default the tokens `train` "
        "would run: the config's steps), epochs per source; exits 1 when a source would repeat more than its max_epochs. "
        "With --gpus (and no --mixture), the memory plan: per candidate layout (dp_replicate x dp_shard x tp x pp, and ep "
        "for a mixture of experts) the parameters, gradients, AdamW states (16 bytes per parameter, every expert "
        "counted), FSDP buffers and activations (with and without activation checkpointing) per GPU, and the fastest "
        "layout that fits; exits 1 when none fits. With --offload, the GPU keeps only the buffers and activations and "
        "the plan says the host memory the offloaded state needs.",
    )  # fmt: skip
    parser.add_argument("--mixture", help="mixture YAML: the data plan")
    parser.add_argument("--config", "--model", dest="config", default="tiny",
                        help=f"preset {'|'.join(PRESETS)} or a settings YAML, as `train --config` takes it")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=int, help="the tokens of this many steps (default: the config's steps, as `train` would run)")
    budget.add_argument("--tokens", type=float, help="tokens to train on, e.g. 2e9")
    budget.add_argument("--chinchilla", action="store_true", help="20 tokens per parameter")
    memory = parser.add_argument_group("memory plan", "with --gpus and no --mixture")
    memory.add_argument("--gpus", type=int, help="GPUs to plan for: the memory plan")
    memory.add_argument("--gpu-memory", type=float, default=80, dest="gpu_memory", help="GiB per GPU (default 80)")
    memory.add_argument("--gpus-per-node", type=int, default=8, dest="gpus_per_node", help="TP stays inside a node (default 8)")
    memory.add_argument("--seq-len", type=int, dest="seq_len", help="tokens per sequence (default: the config's)")
    memory.add_argument("--micro-batch", type=int, dest="micro_batch", help="sequences per GPU per forward (default: the config's)")
    memory.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="parameter and activation dtype (default bf16)")
    memory.add_argument("--scores-stored", action="store_true", dest="scores_stored",
                        help="the attention kernel stores the s x s scores (SDPA math): count Korthikanti's 5as/h term")
    memory.add_argument("--offload", action="store_true",
                        help="plan for `train --offload`: parameters, gradients and optimizer state in host memory")
    return parser


def cmd_export(argv: list[str]) -> int:
    from training.export import export

    parser = argparse.ArgumentParser(
        prog="train export",
        description="Write a training run's checkpoint as a Hugging Face Llama model (safetensors, config.json, "
        "generation_config.json, tokenizer.json + tokenizer_config.json) that transformers, vLLM and "
        "lm-evaluation-harness load. Reads a DCP checkpoint written by any number of ranks.",
    )  # fmt: skip
    parser.add_argument("--checkpoint", required=True, help="RUN (its latest complete checkpoint) or RUN/checkpoints/step-N")
    parser.add_argument("--out", required=True, help="folder to write the model into")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="dtype of the saved weights")
    args = parser.parse_args(argv)
    blocking = next((path for path in (Path(args.out), *Path(args.out).parents) if path.exists() and not path.is_dir()), None)
    if blocking:  # checked before the checkpoint is loaded, which takes a while for a large model
        where = "is an existing file" if blocking == Path(args.out) else f"is inside {blocking}, an existing file"
        print(f"train export: --out {args.out} {where}; name a folder (a missing one is made)", file=sys.stderr)
        return 2
    try:
        step = export(args.checkpoint, args.out, args.dtype)
    except (FileNotFoundError, ValueError) as error:
        print(f"train export: {error}", file=sys.stderr)
        return 2
    print(f"exported {step} to {args.out}: load it with transformers' AutoModelForCausalLM.from_pretrained({args.out!r})")
    return 0


def cmd_plan(argv: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    from training.config import load_config
    from training.data import check_batches
    from training.mixture import MixtureError, load_mixture
    from training.plan import CHINCHILLA_TOKENS_PER_PARAM, over_cap, plan

    args = _plan_parser().parse_args(argv)
    if args.gpus and not args.mixture:
        return cmd_memory_plan(args)
    if not args.mixture or args.gpus:
        print("train plan: give --mixture (the data plan) or --gpus (the memory plan), one of them", file=sys.stderr)
        return 2
    try:
        mixture = load_mixture(args.mixture)
        config = load_config(args.config, steps=args.steps)
        _check_mixture(mixture)
        check_batches(mixture, config.base_shape(), 1)  # on one rank: `train` checks its own rank count too
        params = _num_params(config, mixture)
        base = config.base_shape()
        if args.tokens or args.chinchilla:
            total = int(args.tokens) if args.tokens else CHINCHILLA_TOKENS_PER_PARAM * params
            steps = -(-total // base.tokens_per_step)
        else:
            steps = config.steps
            total = steps * base.tokens_per_step
        phase_tokens = mixture.scheduled_phase_tokens(steps, base)
        sources = plan(mixture, phase_tokens)
    except (MixtureError, ValueError) as error:
        print(f"train plan: {error}", file=sys.stderr)
        return 2
    console = Console() if sys.stdout.isatty() else Console(width=120)
    budget = (f"{args.tokens:.3g} tokens (given)" if args.tokens
              else f"Chinchilla: {CHINCHILLA_TOKENS_PER_PARAM} x {params:,} params" if args.chinchilla
              else f"what `train --config {args.config} --steps {steps}` trains")  # fmt: skip
    console.print(f"mixture [bold]{mixture.name}[/], model {config.model} ({params:,} params): {total:,} tokens, {budget}; "
                  f"{steps:,} steps, {sum(phase_tokens):,} tokens at each phase's length")  # fmt: skip
    phases = Table(title="Phases")
    for column in ("phase", "from step", "seq_len", "tokens/step", "RoPE", "tokens", "weights"):
        phases.add_column(column)
    starts = mixture.phase_start_steps(steps, base)
    for phase, shape, first, tokens in zip(mixture.phases, mixture.shapes(base), starts, phase_tokens):
        phases.add_row(phase.name, f"{first:,}", f"{shape.seq_len:,}", f"{shape.tokens_per_step:,}", shape.rope, f"{tokens:,}",
                       ", ".join(f"{k} {v:g}" for k, v in phase.weights.items()))  # fmt: skip
    console.print(phases)
    table = Table(title="Sources")
    for column in ("source", "selects", "documents", "tokens available", "held out", "tokens asked", "epochs", "max epochs", ""):
        table.add_column(column, justify="left" if column in ("source", "selects", "") else "right")
    for source in sources:
        where = mixture.sources[source.name].where
        table.add_row(source.name, "" if where is None else where.model_dump_json(exclude_none=True), f"{source.documents:,}",
                      f"{source.available:,}", f"{source.held_out:,}", f"{source.asked:,}", f"{source.epochs:.2f}", f"{source.max_epochs:g}",
                      "ok" if source.ok else "[red]over cap[/]")  # fmt: skip
    console.print(table)
    problem = over_cap(sources)
    if problem:
        console.print(f"[red]train plan: {problem}[/]")
        return 1
    return 0


def cmd_memory_plan(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from training import memory_plan as mp
    from training.config import load_config
    from training.model import MODEL_CONFIGS, Transformer

    try:
        config = load_config(args.config, seq_len=args.seq_len, micro_batch=args.micro_batch)
        model = config.model_config_for(MODEL_CONFIGS[config.model].vocab_size)
    except ValueError as error:
        print(f"train plan: {error}", file=sys.stderr)
        return 2
    if args.gpus < 1 or args.gpus_per_node < 1 or args.gpu_memory <= 0:
        print("train plan: --gpus, --gpus-per-node and --gpu-memory are positive", file=sys.stderr)
        return 2
    param_bytes = 2 if args.dtype == "bf16" else 4
    budget = args.gpu_memory * mp.GiB * (1 - mp.HEADROOM)
    estimates = [mp.estimate(model, layout, config.seq_len, config.micro_batch, param_bytes, args.scores_stored)
                 for layout in mp.layouts(model, args.gpus, args.gpus_per_node)]  # fmt: skip
    console = Console() if sys.stdout.isatty() else Console(width=160)
    with torch.device("meta"):
        active = Transformer(model).num_params(active=True)
    active_text = f" ({active / 1e9:.3g}B active)" if active != mp.num_params(model) else ""
    print(f"{args.config}: {mp.num_params(model) / 1e9:.3g}B parameters{active_text}, seq_len {config.seq_len}, micro batch "
                  f"{config.micro_batch}, {args.dtype}; {args.gpus} GPUs of {args.gpu_memory:g} GiB ({args.gpus_per_node} per "
                  f"node): {budget / mp.GiB:.1f} GiB usable after {mp.HEADROOM:.0%} headroom (allocator, NCCL). GiB per GPU, "
                  "fullest pipeline stage; AC: full activation checkpointing")  # fmt: skip
    table = Table()
    for column in ("layout", "params", "grads", "optimizer", "FSDP buffers", "activations", "act. AC", "total", "total AC", "fits"):
        table.add_column(column, justify="left" if column in ("layout", "fits") else "right")
    for e in sorted(estimates, key=lambda e: mp.preference(e, False)):
        fits = "yes" if e.total(False, args.offload) <= budget else "with AC" if e.total(True, args.offload) <= budget else "no"
        table.add_row(e.layout.describe(), *(f"{value / mp.GiB:.2f}" for value in (e.params, e.grads, e.optimizer, e.gathered,
                      e.activations, e.activations_ac, e.total(False), e.total(True))), fits)  # fmt: skip
    console.print(table)
    chosen = mp.choose(estimates, budget, args.offload)
    if chosen is None:
        print(f"train plan: {_no_fit(args, model, config, estimates, budget, param_bytes)}", file=sys.stderr)
        return 1
    best, checkpointing, reason = chosen
    flags = " ".join(f"--{name.replace('_', '-')} {size}" for name, size in vars(best.layout).items() if size > 1)
    flags += " --offload" if args.offload else ""
    print(f"chosen: {best.layout.describe()}{' + activation checkpointing' if checkpointing else ''} "
                  f"({best.total(checkpointing, args.offload) / mp.GiB:.1f} GiB per GPU; train {flags.strip() or '(no layout flags)'}): {reason}")  # fmt: skip
    if args.offload:
        per_node = min(args.gpus, args.gpus_per_node)
        print(f"offload: {best.state() / mp.GiB:.1f} GiB per GPU moves to host memory ({best.state() * per_node / mp.GiB:.1f} "
              f"GiB per node of {per_node} GPUs, pinned), saving that much on each GPU")  # fmt: skip
    return 0


def _no_fit(args, model, config, estimates, budget: float, param_bytes: int) -> str:
    """Why no layout fits, and what would help: when the training state alone (weights, gradients, AdamW states, FSDP
    buffers: none of it depends on the sequence) is over the budget on every layout, only sharding it over more GPUs
    or a smaller model does, and the line names the fewest GPUs (doubling) that fit."""
    from training import memory_plan as mp

    least = min(estimates, key=lambda e: e.total(True))
    line = (f"no layout of {args.config} fits {args.gpus} GPUs of {args.gpu_memory:g} GiB; the smallest is "
            f"{least.total(True) / mp.GiB:.1f} GiB ({least.layout.describe()}, AC)")  # fmt: skip
    state = min(e.params + e.grads + e.optimizer + e.gathered for e in estimates)
    if state <= budget:
        return line + ": more GPUs, a shorter --seq-len or a smaller --micro-batch"
    enough = next((gpus for gpus in (args.gpus * 2**k for k in range(1, 21)) if mp.choose(
        [mp.estimate(model, layout, config.seq_len, config.micro_batch, param_bytes, args.scores_stored)
         for layout in mp.layouts(model, gpus, args.gpus_per_node)], budget)), None)  # fmt: skip
    shard = f"{enough} such GPUs fit" if enough else f"no count up to {args.gpus * 2**20:,} fits"
    return (line + f", and the weights, gradients and AdamW states alone take {state / mp.GiB:.1f} GiB per GPU (no shorter "
            f"--seq-len or smaller --micro-batch helps): shard them with FSDP over more GPUs ({shard}), or train a "
            "smaller model")  # fmt: skip


def _vocab_size(mixture) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_str(storage.read_text(mixture.tokenizer_path())).get_vocab_size()


def _num_params(config, mixture) -> int:
    from training.model import Transformer

    with torch.device("meta"):
        return Transformer(config.model_config_for(_vocab_size(mixture))).num_params()


OVERRIDES = ("steps", "seq_len", "global_batch", "micro_batch", "lr", "dtype", "attention", "checkpoint_every", "lineage_every", "seed",
             "eval_every", "eval_sequences", "spike_policy", "z_loss", "average_last", "shuffle_sequences", "dp_replicate", "dp_shard",
             "tp", "pp", "pp_schedule", "pp_microbatches", "cp", "ep", "fp8", "optimizer", "offload")  # fmt: skip


VALIDATED = "TRAIN_VALIDATED"  # set by `train` for the ranks it launches, which skip what it checked


def _check_mixture(mixture) -> None:
    """What `train` and `train plan` both refuse in a mixture: a source without shards, no tokenizer, sources
    tokenized with another tokenizer, shards changed since `curate tokenize`; raises MixtureError with one line."""
    from training.mixture import MixtureError

    for name in mixture.source_names():
        mixture.shard_files(name)
    if not storage.is_file(mixture.tokenizer_path()):
        raise MixtureError(f"tokenizer not found: {mixture.tokenizer_path()}")
    mixture.check_one_tokenizer()
    mixture.check_shards_intact()


def _check_data(args, mixture, config, layout):
    """The mixture's checks (_check_mixture), repetition within the sources' caps, every phase's batch split over the
    layout's data-parallel ranks (and pipeline micro-batches), the layout fits the model: raises MixtureError or
    ValueError with one line. Returns the shards read (None under a torchrun launched by hand, whose every rank would
    read every shard)."""
    from training.data import check_batches, read_sources
    from training.plan import over_cap, plan

    _check_mixture(mixture)
    check_batches(mixture, config.base_shape(), layout.dp)
    layout.check_model(config.model_config_for(_vocab_size(mixture)))
    if layout.pp > 1:
        from training.pipeline import microbatches

        for shape in mixture.shapes(config.base_shape()):
            microbatches(layout, shape)
    shards = None if "LOCAL_RANK" in os.environ else read_sources(mixture)
    if shards:
        problem = over_cap(plan(mixture, mixture.scheduled_phase_tokens(config.steps, config.base_shape()), shards))
        if problem:
            raise ValueError(f"{problem} (see `train plan --mixture {args.mixture}`)")
    return shards


def _check_resume(args, mixture, config, shards, speaker: bool) -> tuple[Path | None, dict]:
    """The checkpoint a run continues from and its train state: no run clobbered, a resume with the run's seed and
    sequence lengths, scored on the held-out slice it began with; raises ValueError with one line. A resume says in
    one line each newer checkpoint it skips as incomplete (the one it resumes from is loaded without a doubt)."""
    import json

    from training import checkpoint
    from training.data import check_resumable

    skipped: list[tuple[Path, str]] = []
    previous = checkpoint.latest(Path(args.out) / "checkpoints", skipped)
    if args.resume and speaker:
        for path, why in skipped:
            print(f"train: checkpoint {path} is incomplete ({why}): resuming from {previous.name if previous else 'step 0'} "
                  "instead; a save at its step replaces it", file=sys.stderr)  # fmt: skip
    if previous is None:
        return None, {}
    if not args.resume:
        raise ValueError(f"{args.out} already holds a run (latest checkpoint {previous.name}): pass --resume to "
                         "continue it, or choose another --out")  # fmt: skip
    state = json.loads((previous / checkpoint.STATE_FILE).read_text())
    try:
        check_resumable(state["data"], config.seed, [shape.seq_len for shape in mixture.shapes(config.base_shape())],
                        config.shuffle_sequences, mixture.ramp_stages(config.base_shape()))  # fmt: skip
    except ValueError as error:
        raise ValueError(f"{previous}: {error}") from None
    if shards and config.eval_every:
        _same_validation(mixture, previous, state, shards)
    return previous, state


def _same_validation(mixture, previous: Path, state: dict, shards) -> None:
    """A resume is scored on the slice the run began with, or it says which source's slice changed."""
    from training.data import validation_digest, validation_selections

    saved = state.get("validation")
    if saved is None:
        return
    now = validation_digest(validation_selections(mixture, shards))
    changed = sorted(name for name in set(saved) | set(now) if saved.get(name) != now.get(name))
    if changed:
        raise ValueError(f"the held-out validation documents of {changed} differ from those of {previous}: the shards were "
                         "tokenized again or the mixture changed; resume with the same data, or start a new --out")  # fmt: skip


def _lock(out: Path) -> Path:
    """Take the run folder's lock (see training.run_lock); an --out that cannot be written is a ValueError."""
    try:
        return run_lock.acquire(out)
    except OSError as error:
        raise ValueError(f"cannot write into --out {out}: {error.strerror} ({error.filename})") from None


def main(argv: list[str] | None = None) -> int:
    from training.config import load_config
    from training.launch import launch, run_here, run_rank, tie_to_launcher
    from training.mixture import MixtureError, load_mixture

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["plan"]:
        return cmd_plan(argv[1:])
    if argv[:1] == ["export"]:
        return cmd_export(argv[1:])
    launcher = "LOCAL_RANK" not in os.environ
    if not launcher:
        tie_to_launcher()
    args = _parser().parse_args(argv)
    speaker = launcher or os.environ.get("RANK") == "0"  # the one process that holds the lock and prints notes
    out, lock = Path(args.out), None
    try:
        if args.max_restarts < 0:
            raise ValueError(f"--max-restarts {args.max_restarts}: give 0 (no restarts) or more")
        if args.ranks is not None and args.ranks < 1:
            raise ValueError(f"--ranks {args.ranks}: give 1 or more processes (or leave it out: the GPUs, else 2)")
        mixture = load_mixture(args.mixture)
        config = load_config(args.config, **{k: getattr(args, k) for k in OVERRIDES})
        ranks = args.ranks or config.parallelism.ranks() or torch.cuda.device_count() or 2
        layout = config.parallelism.resolve(ranks if launcher else int(os.environ["WORLD_SIZE"]))
        if os.environ.get(VALIDATED) != "1":  # the ranks our own launch starts skip what it checked
            fp8.check(config.fp8, torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu"))
            shards = _check_data(args, mixture, config, layout)
            lock = _lock(out) if speaker else None
            previous, state = _check_resume(args, mixture, config, shards, speaker)
            if previous and state["step"] >= config.steps:
                if speaker:
                    print(f"train: {out} is already at step {state['step']} (--steps {config.steps}): nothing to train; "
                          "raise --steps to continue")  # fmt: skip
                run_lock.release(lock)
                return 0
            if args.resume and not previous and speaker:
                print(f"train: no checkpoint in {out}: starting from step 0")
    except (MixtureError, ValueError, run_lock.RunLocked) as error:
        run_lock.release(lock)
        print(f"train: {error}", file=sys.stderr)
        return 2
    in_process = launcher and ranks == 1 and args.max_restarts == 0  # one rank, nothing to restart: it runs here
    if launcher and not in_process:
        os.environ[VALIDATED] = "1"
        try:
            return launch(argv, ranks, out, args.max_restarts)
        finally:
            run_lock.release(lock)
    from training.trainer import train

    try:
        code = (run_here if in_process else run_rank)(lambda: train(config, mixture, out, args.resume))
    finally:  # a traceback in a rank run here leaves no lock behind
        run_lock.release(lock)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # gloo can abort at interpreter exit after destroy_process_group


if __name__ == "__main__":
    sys.exit(main())
