"""`curate`: run a recipe on Ray, print a run's funnel, or write the sample snapshot."""

import argparse
import gc
import glob
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

DEFAULT_SAMPLE = Path("runs/sample-snapshot")
SAMPLE_PAGES, SAMPLE_FILES = 1000, 4


def positive_int(value: str) -> int:
    """argparse type: an integer >= 1, so `--max-files 0` is a usage error, not a run of nothing."""
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return number


def input_arguments(parser: argparse.ArgumentParser) -> None:
    """What `curate run` and `curate ablate` read: files, a Common Crawl crawl, or the sample snapshot; and where Ray runs."""
    parser.add_argument("--input", action="append", metavar="PATH_OR_GLOB",
                        help="WARC/WET files: local paths, globs or fsspec URLs (s3://, https://), and local folders or "
                        ".html/.htm(.gz) files of saved web pages; for code-corpus: "
                        "repository folders (git checkouts read as `git ls-files`), a folder of them, .tar.gz/.zip "
                        "archives, *.dist-info folders, Parquet in The Stack's layout; repeatable")  # fmt: skip
    parser.add_argument("--snapshot", metavar="CC-MAIN-YYYY-WW",
                        help="Common Crawl crawl: without --input, read its WARC files from warc.paths.gz")  # fmt: skip
    parser.add_argument("--paths-file", help="a local copy of the crawl's warc.paths(.gz) to use instead of fetching it")
    parser.add_argument("--max-files", type=positive_int, help="use only the first N input files (code: repositories) of each recipe")
    parser.add_argument("--ray-address", help="join an existing Ray cluster: auto (the one `ray start` runs on this "
                        "machine), its head's HOST:6379, or ray://HOST:10001 (Ray Client: pip install 'pretrain-stack[cluster]')")
    parser.add_argument("--num-cpus", type=positive_int, help="CPUs of the local Ray cluster (default: all)")
    parser.add_argument("--sample-pages", type=positive_int, default=SAMPLE_PAGES, help="pages of the built-in sample snapshot")
    parser.add_argument("--sample-files", type=positive_int, default=SAMPLE_FILES, help="WARC files of the built-in sample snapshot")


def _parser(more: dict | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="curate",
        description="Curate web text: WARC -> extraction -> language ID -> ... as Parquet shards with stats.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run",
        help="run recipes (built-in names or YAML paths) on Ray",
        description="Run a recipe. With no --input/--snapshot it curates the built-in sample snapshot. "
        "A rerun into the same --output resumes: finished shards are skipped; a changed stage config reruns "
        "that stage and every stage after it. Several recipes run one after another on one Ray (started once), "
        "each on its built-in input into runs/<recipe>.",
    )
    run.add_argument("recipes", nargs="+", metavar="recipe",
                     help="built-in recipe name (e.g. fineweb-snapshot) or path to a recipe YAML; several share one Ray")
    input_arguments(run)
    run.add_argument("--output", help="run folder (default: runs/<recipe>)")
    run.add_argument("--keep-removed", action="store_true", help="also write dropped documents to OUT/removed/<stage>/")
    run.add_argument("--keep-intermediate", action="store_true",
                     help="UNSAFE: keep the parts written before a redacting stage (secrets, pii), which are deleted "
                     "when the run finishes because they hold the text it redacts; a later change to a stage after "
                     "them then resumes from them instead of redoing the run")  # fmt: skip
    run.add_argument("--materialize-all", action="store_true",
                     help="write every stage's parts (for debugging); by default the stages between two dedup stages "
                     "run fused in memory and only the last one before each dedup stage and the final one are written")  # fmt: skip

    stats = commands.add_parser("stats", help="print the funnel of a run folder")
    stats.add_argument("output", help="a folder written by `curate run`")

    from curation.tokenize import SAMPLE_BYTES, SAMPLE_SEED

    tokenize = commands.add_parser(
        "tokenize",
        help="tokenize runs' curated text into token shards for `train`, all with one tokenizer",
        description="Writes RUN/tokens/part-*.parquet (id, source, tokens, n_tokens), tokenizer.json and stats.json "
        "(documents and tokens per source) for every RUN, one Ray task per curated part (a local Ray unless "
        "--ray-address). Without --tokenizer one byte-level BPE is trained on a seeded sample of the curated text of "
        "all of them (at most --tokenizer-sample-bytes, from runs and sources in proportion to their size; recorded in "
        "RUN/tokens/tokenizer_sample.json and reused by a rerun), so the runs of one mixture (web, code, rest) can be "
        "tokenized in one command. It reads the final stage of the recipe each RUN was last run with. A rerun skips "
        "the parts already done (their stats are in RUN/tokens/parts/ and their sha256 still matches), so a killed run "
        "resumes and a changed part is redone. A tokenizer that runs outside the command were also tokenized with is "
        "kept (unless --retrain-tokenizer), so one run can be retokenized alone; token parts of inputs "
        "a run no longer has are deleted. Read the parts by their glob (RUN/tokens/part-*.parquet): the JSON files lie "
        "beside them.",
    )
    tokenize.add_argument("output", nargs="+", help="folders written by `curate run`")
    tokenize.add_argument("--tokenizer", help="an HF tokenizers tokenizer.json to use (must have <|endoftext|>)")
    tokenize.add_argument("--vocab-size", type=int, default=8192, help="vocabulary of a newly trained tokenizer")
    tokenize.add_argument("--retrain-tokenizer", action="store_true",
                          help="train a new tokenizer over these runs even where their tokens/ holds one that other "
                          "runs' tokens were made with (e.g. `curate tokenize A` after `curate tokenize A B C`; without "
                          "it that one is kept); the runs left on the old one are named, to tokenize again")  # fmt: skip
    tokenize.add_argument("--validation-fraction", type=float, dest="validation_fraction",
                          help="documents held out for validation loss, chosen by a hash of their id (column `split`); "
                          "`train` never trains on them (default: 1 in 100)")  # fmt: skip
    tokenize.add_argument("--tokenizer-sample-bytes", type=positive_int, default=SAMPLE_BYTES, metavar="BYTES",
                          help=f"text a newly trained tokenizer is trained on at most (default: {SAMPLE_BYTES // 2**20} MiB)")
    tokenize.add_argument("--tokenizer-sample-seed", type=int, default=SAMPLE_SEED, metavar="SEED", help="seed of that sample")
    tokenize.add_argument("--ray-address", help="join an existing Ray cluster (as `curate run --ray-address`)")
    tokenize.add_argument("--num-cpus", type=positive_int, help="CPUs of the local Ray cluster (default: all)")

    quality = commands.add_parser("quality", help="train or evaluate a fastText quality classifier")
    quality_commands = quality.add_subparsers(dest="quality_command", required=True)
    train = quality_commands.add_parser(
        "train",
        help="train a DCLM-style fastText classifier (word bigrams, __label__hq vs __label__cc)",
        description="Examples come from --positive/--negative files (every document one class) or a --labelled file "
        "(label field 1 = keep, 0 = drop); JSONL(.gz) or Parquet. A held-out split is scored and printed.",
    )
    train.add_argument("--positive", nargs="+", default=[], metavar="FILE")
    train.add_argument("--negative", nargs="+", default=[], metavar="FILE")
    train.add_argument("--labelled", nargs="+", default=[], metavar="FILE")
    train.add_argument("--out", required=True, help="model file to write (.bin)")
    train.add_argument("--holdout", type=float, default=0.1, help="fraction kept out of training to report scores on")
    train.add_argument("--epoch", type=int, default=50)
    train.add_argument("--lr", type=float, default=0.5)
    train.add_argument("--dim", type=int, default=64)
    train.add_argument("--word-ngrams", type=int, default=2)
    train.add_argument("--bucket", type=int, default=200_000, help="hash buckets of word n-grams")
    train.add_argument("--select", action="store_true",
                       help="choose epoch, lr and word n-grams by 4-fold CV on the training documents first")  # fmt: skip
    train.add_argument("--quantize", action="store_true", help="write fastText's compressed model (.ftz)")
    train.add_argument("--cutoff", type=int, default=20_000, help="with --quantize: rows of the embedding kept")
    train.add_argument("--combine", action="store_true",
                       help="also fit a logistic regression of the fastText score with the heuristics' signals (word "
                       "count, stop words, punctuation, repetition) on out-of-fold scores; written beside the model as "
                       "MODEL.combiner.json, which the quality stage then uses")  # fmt: skip
    train.add_argument("--threads", type=int, default=1, help="more is faster but not reproducible")
    train.add_argument("--seed", type=int, default=0)
    cv = quality_commands.add_parser(
        "cv", help="nested cross-validated AUC of `quality train --select`, beside a length-only baseline",
        description="Per outer fold, epoch/lr/word n-grams are chosen by inner CV on the other folds only, then a model "
        "is trained on them (quantized with --quantize, like the shipped one) and scored on the held-out fold, so "
        "the AUC is not tuned on what it is scored on. The baseline scores documents by word count.",
    )  # fmt: skip
    cv.add_argument("labelled", nargs="+", help="JSONL(.gz) or Parquet with a text field and a 0/1 label field")
    cv.add_argument("--outer", type=int, default=5)
    cv.add_argument("--inner", type=int, default=4)
    cv.add_argument("--quantize", action="store_true", help="score quantized outer models (--cutoff rows)")
    cv.add_argument("--cutoff", type=int, default=20_000)
    cv.add_argument("--seed", type=int, default=0)
    evaluate = quality_commands.add_parser("eval", help="accuracy, precision, recall and AUC of a model on a labelled file, "
                                           "with a bootstrap interval and the length-only baseline beside it")
    evaluate.add_argument("--model", required=True)
    evaluate.add_argument("labelled", help="JSONL(.gz) or Parquet with a text field and a 0/1 label field")
    evaluate.add_argument("--threshold", type=float, default=0.5)
    evaluate.add_argument("--seed", type=int, default=0, help="of the bootstrap resamples")
    head = quality_commands.add_parser(
        "train-model", help="fit a regression or classification head on annotations over a frozen encoder, saved as a "
        "Hugging Face classifier the model_score stage loads",
        description="FineWeb-Edu's recipe: the encoder (a BERT-family folder, or a `train export`) stays as it is and "
        "the head transformers puts on it is fitted to the labels (ridge regression, or softmax regression with "
        "--task classes). Duplicate texts are counted once; --holdout of them is scored and printed beside a fastText "
        "classifier trained on the same split to tell label >= --positive-from apart: Spearman correlation with the "
        "label and AUC, with 95% bootstrap intervals.",
    )  # fmt: skip
    head.add_argument("--labelled", nargs="+", required=True, metavar="FILE",
                      help="JSONL(.gz) or Parquet files (or quoted globs): text and an integer label")  # fmt: skip
    head.add_argument("--encoder", required=True, help="a model folder (save_pretrained's layout) with its tokenizer")
    head.add_argument("--out", required=True, help="folder to write the classifier to")
    head.add_argument("--task", choices=["regression", "classes"], default="regression")
    head.add_argument("--max-tokens", type=positive_int, default=512, help="tokens of each document the encoder reads")
    head.add_argument("--pooling", choices=["auto", "head", "mean"], default="auto",
                      help="what the head reads: transformers' own input (head: BERT's pooled first token, a decoder's "
                      "last token) or the mean of the last hidden states (mean); auto: mean for a decoder")  # fmt: skip
    head.add_argument("--positive-from", type=int, default=3, help="the label from which a document counts as positive "
                      "in the AUC and for fastText (FineWeb-Edu keeps score >= 3)")  # fmt: skip
    head.add_argument("--holdout", type=float, default=0.2)
    head.add_argument("--seed", type=int, default=0)
    for sub in (train, cv, evaluate, head):
        sub.add_argument("--text-field", default="text")
        sub.add_argument("--label-field", default="label")

    decontam = commands.add_parser("decontam", help="benchmark decontamination: build the n-gram index of benchmarks")
    decontam_commands = decontam.add_subparsers(dest="decontam_command", required=True)
    index = decontam_commands.add_parser(
        "index", help="index local benchmark files (no download); the decontam stage loads it with `index: FOLDER`",
        description="Word n-grams (lowercase, no punctuation) of every benchmark item, hashed, in FOLDER.",
    )
    index.add_argument("--benchmarks", nargs="+", required=True, metavar="FORMAT=PATH",
                       help="a built-in format and its file or folder, e.g. mmlu=mmlu/test hellaswag=hellaswag_val.jsonl; "
                            "a bare gsm8k or humaneval takes the copy shipped in the package")  # fmt: skip
    index.add_argument("--ngram", type=positive_int, default=13, help="words per n-gram")
    index.add_argument("--min-words", type=int, default=8, help="items shorter than this are not indexed")
    index.add_argument("--output", default="runs/decontam-index", help="folder to write the index into")
    decontam_commands.add_parser("formats", help="the built-in benchmark formats and the fields they index")

    extract = commands.add_parser("extract", help="train the resiliparse_blocks extractor's block classifier")
    extract_commands = extract.add_subparsers(dest="extract_command", required=True)
    blocks = extract_commands.add_parser(
        "train-blocks", help="fit the block classifier on the extraction development sets' training split",
        description="Reads the article-extraction-benchmark's and Readability's pages (SETS/article-extraction-"
        "benchmark, SETS/readability), labels resiliparse's main-content blocks by the reference text, fits the "
        "classifier on the training split (a hash of each page's name: 60% of pages) and writes its weights. "
        "benchmarks/extraction_quality.py scores it on the held-out 40%.",
    )  # fmt: skip
    blocks.add_argument("--sets", help="the folder holding both development sets (default: ../shared/corpus/html)")
    blocks.add_argument("--out", default="runs/extract-blocks/model.json",
                        help="the model file to write (default: %(default)s; the package's own, "
                        "filters/assets/extract_blocks/model.json, is replaced only when named)")  # fmt: skip
    blocks.add_argument("--seed", type=int, default=0)

    report = commands.add_parser("report", help="render a run's figures (funnel, reasons, languages, ...) to static HTML")
    report.add_argument("output", help="a folder written by `curate run`")
    report.add_argument("--html", help="file to write (default: OUTPUT/report.html)")

    sample = commands.add_parser("sample", help="write the deterministic sample snapshot (WARC files + truth.parquet)")
    sample.add_argument("--pages", type=int, default=SAMPLE_PAGES)
    sample.add_argument("--files", type=int, default=SAMPLE_FILES)
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--out", required=True, help="folder to write into")
    for name, (summary, add_arguments, _) in (more or {}).items():
        add_arguments(commands.choices.get(name) or commands.add_parser(name, help=summary))
    return parser


def text_inputs(args, console: Console) -> tuple[list[str], str]:
    """Directories or files of prose; without --input, Python's reference docs."""
    from curation.sources import python_docs
    from curation.sources.text_corpus import SUFFIXES, readable

    if not args.input:
        paths = python_docs.ensure()
        console.print(f"[bold]No --input: curating Python's shipped reference docs[/] (help() topics and module "
                      f"docstrings, {len(paths)} shards in {Path(paths[0]).parent}/)")  # fmt: skip
        return paths[: args.max_files], args.snapshot or f"python-docs-{Path(paths[0]).parent.name}"
    wanted = f"{'/'.join(SUFFIXES)} files nor WikiExtractor output"
    return local_inputs(args, "text", readable, wanted), args.snapshot or "local"


def html_inputs(args) -> tuple[list[str], str]:
    """Directories or files of saved web pages."""
    from curation.sources.html_pages import PAGE_SUFFIXES, is_page

    if not args.input:
        raise SystemExit("curate: an html source has no built-in input: give --input, a folder or file of web pages")
    return local_inputs(args, "html", is_page, f"{'/'.join(PAGE_SUFFIXES)} pages"), args.snapshot or "local"


def local_inputs(args, kind: str, readable, wanted: str) -> list[str]:
    """Local directories or files of a kind (text, html), checked here: a wrong path is one line before Ray starts,
    not a traceback."""
    from curation.sources.local_files import input_files

    inputs = []
    for pattern in args.input:
        if "://" in pattern:
            raise SystemExit(f"curate: --input {pattern!r}: a {kind} source reads local folders and files; copy it here")
        for path in sorted(glob.glob(pattern)) or [pattern]:
            if not os.path.exists(path):
                raise SystemExit(f"curate: --input {path!r} does not exist")
            if not any(map(readable, input_files(path, kind))):
                raise SystemExit(f"curate: --input {path!r} has no {wanted}")
            inputs.append(str(Path(path).resolve()))
    return sorted(dict.fromkeys(inputs))[: args.max_files]


FOLDER_NOTES = re.compile(r"(?i)^(readme|index|manifest|repos|repositories)\b.*\.(md|txt|rst|csv|json)$|^readme$")


def code_inputs(args, console: Console) -> tuple[list[str], str]:
    """Repositories: folders, archives, dist-info folders, Parquet files in The Stack's layout (these two also as
    fsspec URLs). A folder holding only folders, archives and Parquet files (and READMEs or lists beside them) is a
    folder of repositories, each one an input; one with a file of its own at the top is one repository."""
    from curation.sources.code_repositories import default_inputs, is_archive

    if not args.input:
        console.print("[bold]No --input: curating this Python's standard library and the packages this project installs[/]"
                      " (a shard per package)")  # fmt: skip
        return default_inputs()[: args.max_files], args.snapshot or "installed"
    inputs = []
    for pattern in args.input:
        if "://" in pattern:
            import fsspec

            inputs += [opened.full_name for opened in fsspec.open_files(pattern, "rb", expand=True)]
            continue
        matched = sorted(glob.glob(pattern)) or [pattern]
        for path in matched:
            if not os.path.exists(path):
                raise SystemExit(f"curate: --input {path!r} does not exist")
            if os.path.isfile(path) and not (is_archive(path) or path.endswith(".parquet")):
                raise SystemExit(f"curate: --input {path!r} is a file but not a .parquet, .tar.gz, .tgz, .tar or .zip")
            entries = [e for e in sorted(Path(path).iterdir()) if not e.name.startswith(".")] if os.path.isdir(path) else []
            members = [e for e in entries if e.is_dir() or is_archive(e.name) or e.name.endswith(".parquet")]
            notes = [e for e in entries if e not in members and FOLDER_NOTES.match(e.name)]  # a README beside them
            if members and not (Path(path) / ".git").exists() and not path.endswith(".dist-info") and len(members) + len(notes) == len(entries):
                console.print(f"{path}: a folder of repositories ({len(members)}; {len(notes)} note file(s) not read)")
                inputs += [str(entry.resolve()) for entry in members]
            else:
                inputs.append(str(Path(path).resolve()))
    return sorted(dict.fromkeys(inputs))[: args.max_files], args.snapshot or "local"


def resolve_inputs(args, console: Console, kind: str = "warc") -> tuple[list[str], str]:
    """The input files (for code: repository directories) and the snapshot name they belong to."""
    from curation.sources.commoncrawl import commoncrawl_warc_urls, snapshot_of

    if kind == "text":
        return text_inputs(args, console)
    if kind == "code":
        return code_inputs(args, console)
    if kind == "html":
        return html_inputs(args)
    if args.input:
        import fsspec
        from fsspec.implementations.local import LocalFileSystem

        from curation.sources.html_pages import has_pages

        files = []
        for pattern in args.input:
            fs, path = fsspec.core.url_to_fs(pattern)
            local = isinstance(fs, LocalFileSystem)
            # `?` and `[0-3]` glob as `*` does (fsspec's open_files expands `*` only), unless a file has that very name;
            # in an http(s) URL `?` starts the query
            web = pattern.startswith(("http://", "https://"))
            globbed = ("*" in path if web else glob.has_magic(path)) and not fs.exists(path)
            # a local folder of web pages is an input (read as html); a glob passes over other folders
            matched = [m for m in sorted(fs.glob(path)) if not fs.isdir(m) or local and has_pages(m)] if globbed else [path]
            if not matched:
                raise SystemExit(f"curate: --input {pattern!r} matches no file")
            names = [m if local else fs.unstrip_protocol(m) for m in matched]
            for name, m in zip(names, matched):
                if local and fs.isdir(m) and not has_pages(m):
                    raise SystemExit(f"curate: --input {name!r} is a folder without .html/.htm pages: name its WARC files "
                                     f"(a glob such as {os.path.join(name, '*.warc.gz')!r})")  # fmt: skip
                if not (fs.isfile(m) or local and fs.isdir(m)):  # a plain path (no glob) comes back whether or not it exists
                    raise SystemExit(f"curate: --input {name!r} is not a file")
            files += names
        files = sorted(dict.fromkeys(files))[: args.max_files]
        return files, args.snapshot or snapshot_of(files[0]) or "unknown"
    if args.snapshot:
        return commoncrawl_warc_urls(args.snapshot, args.max_files, args.paths_file), args.snapshot
    from curation.sources import sample  # Faker, imported only where the sample is made

    console.print(f"[bold]No --input: curating the built-in sample snapshot[/] ({args.sample_pages} pages in {DEFAULT_SAMPLE}/)")
    paths = sample.ensure(DEFAULT_SAMPLE, args.sample_pages, args.sample_files)
    return [str(p.resolve()) for p in paths][: args.max_files], sample.SNAPSHOT


class StageProgress:
    """A rich bar per stage: shards done/total and documents per second."""

    def __init__(self, progress: Progress, stage_dirs: list[str], shards: int):
        self.progress = progress
        self.started = time.perf_counter()
        self.docs = dict.fromkeys(stage_dirs, 0)
        self.tasks = {d: progress.add_task(d, total=shards, docs=0, rate=0.0, unit="shards") for d in stage_dirs}

    def __call__(self, stage_dir: str, shard_stats: dict | None) -> None:
        if shard_stats:
            self.docs[stage_dir] += shard_stats["docs_in"]
        rate = self.docs[stage_dir] / max(1e-9, time.perf_counter() - self.started)
        self.progress.update(self.tasks[stage_dir], advance=1, docs=self.docs[stage_dir], rate=rate)

    def pass_step(self, stage_dir: str, step: str, done: int, total: int) -> None:
        """A bar per step of a duplicate stage's corpus-wide pass (tasks, not shards)."""
        key = f"{stage_dir} {step}"
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(f"  {step}", total=total, docs=0, rate=0.0, unit="tasks")
        self.progress.update(self.tasks[key], completed=done)


def make_console() -> Console:
    """Full-width tables in logs and pipes too (rich falls back to 80 columns there)."""
    return Console() if sys.stdout.isatty() else Console(width=120)


def cmd_run(args) -> int:
    """Every recipe, its inputs and its output are checked before Ray starts; then they run in order on one Ray."""
    from curation import ray_session
    from curation.recipe import RecipeError, load_recipe
    from curation.run_folder import LOCK_FILE, RunFolder
    from shard_contract import folder_lock
    from shard_contract.folder_lock import FolderLocked

    console = make_console()
    if len(args.recipes) > 1:
        chosen = [flag for flag, value in (("--input", args.input), ("--output", args.output), ("--snapshot", args.snapshot),
                                           ("--paths-file", args.paths_file)) if value]  # fmt: skip
        if chosen:
            print(f"curate: {chosen[0]} names one recipe's data: give one recipe with it, not {len(args.recipes)}", file=sys.stderr)
            return 2
    try:
        recipes = [load_recipe(name) for name in args.recipes]
    except RecipeError as error:
        print(f"curate: {error}", file=sys.stderr)
        return 2
    if args.ray_address:
        ray_session.check_address(args.ray_address)
    plans = []
    for recipe in recipes:
        inputs, snapshot = resolve_inputs(args, console, recipe.source.kind)
        if not inputs:
            raise SystemExit(f"curate: no input files for {recipe.name}")
        try:
            check_input_columns(recipe, inputs)
        except RecipeError as error:
            print(f"curate: {error}", file=sys.stderr)
            return 2
        output = args.output or f"runs/{recipe.name}"
        if os.path.isfile(output):
            raise SystemExit(f"curate: --output {output!r} is a file; give a folder for the run")
        unwritable = RunFolder.unwritable(output)  # before Ray starts: a minute of start-up to learn this is a waste
        if unwritable:
            raise SystemExit(f"curate: --output {output!r} is not writable: {unwritable}")
        if any(output == planned[3] for planned in plans):
            print(f"curate: two recipes would write {output}: give recipes of different names", file=sys.stderr)
            return 2
        try:
            folder_lock.check(output, LOCK_FILE, "curate run")  # before Ray starts; runner.run takes the lock
        except FolderLocked as error:
            print(f"curate: {error}", file=sys.stderr)
            return 2
        plans.append((recipe, inputs, snapshot, output))
    started = ray_session.connect(args.ray_address, args.num_cpus, owner=plans[0][3])
    try:
        return max(run_recipe(args, console, *plan) for plan in plans)
    except FolderLocked as error:  # taken between the check and the run
        print(f"curate: {error}", file=sys.stderr)
        return 2
    finally:
        ray_session.disconnect(started, owner=plans[0][3])


def check_input_columns(recipe, inputs: list[str]) -> None:
    """A Parquet source carries its own columns (FineWeb's `score`): a stage that would replace one is refused before
    Ray starts, as the recipe's own clashes are at load. The first input's schema stands for them all."""
    from curation.recipe import check_columns, source_columns

    if recipe.source.kind == "parquet" and inputs[0].endswith(".parquet"):
        import fsspec
        import pyarrow.parquet as pq

        try:
            with fsspec.open(inputs[0], "rb") as handle:
                names = set(pq.read_schema(handle).names)
        except (OSError, ValueError):  # the read stage reports an unreadable input by name
            return
        check_columns(recipe, source_columns("parquet") | names, f"{recipe.name} on {inputs[0]}")


def run_recipe(args, console: Console, recipe, inputs: list[str], snapshot: str, output: str) -> int:
    from curation import runner, stats

    console.print(f"recipe [bold]{recipe.name}[/] on {len(inputs)} file(s) of snapshot {snapshot} -> {output}")
    columns = [TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[unit]:<6}  {task.fields[docs]:>8,} docs  {task.fields[rate]:>7.0f} docs/s"), TimeElapsedColumn()]  # fmt: skip
    with Progress(*columns, console=console) as progress:
        on_shard = StageProgress(progress, recipe.stage_dirs(), len(inputs))
        result = runner.run(
            recipe, inputs, output, snapshot, keep_removed=args.keep_removed, materialize_all=args.materialize_all,
            keep_intermediate=args.keep_intermediate,
            ray_address=args.ray_address, num_cpus=args.num_cpus, progress=on_shard, on_step=on_shard.pass_step,
        )  # fmt: skip
    if result.removed_stages:
        console.print(f"removed stage folders the current recipe does not have: {', '.join(result.removed_stages)}", soft_wrap=True)
    for stage_dir, files in result.changed_files.items():
        console.print(f"rerun: {stage_dir} and the stages after it: {', '.join(files)} changed since it ran", soft_wrap=True)
    if result.changed_inputs:
        console.print(f"rerun: {len(result.changed_inputs)} input(s) changed since they were read "
                      f"({', '.join(result.changed_inputs[:3])}{', ...' if len(result.changed_inputs) > 3 else ''})",
                      soft_wrap=True)  # fmt: skip
    if result.rerun_for_removed:
        console.print(f"rerun: {', '.join(result.rerun_for_removed)}: done without --keep-removed, redone to write "
                      "their removed documents", soft_wrap=True)  # fmt: skip
    if result.skipped_shards:
        console.print(f"resumed: {result.skipped_shards} stage-shard(s) were already done and skipped")
    if result.released_stages:
        console.print(f"deleted the parts of {', '.join(result.released_stages)}: they hold text a later stage redacts "
                      "(--keep-intermediate keeps them, unsafe)", soft_wrap=True)  # fmt: skip
    stats.print_funnel(stats.stage_totals(output), console)
    stats.print_passes(stats.load_passes(output), console)
    report = Path(output) / "decontamination.parquet"
    if report.exists():
        import pyarrow.parquet as pq

        console.print(f"decontamination report: {report} ({pq.read_metadata(report).num_rows:,} hits)")
    for failure in result.failures:
        console.print(f"[red]failed[/] {failure.stage} shard {failure.shard} ({failure.input}): {failure.error}", soft_wrap=True)
    if result.failures:
        print_failure_hint(console, len(result.failures), sum(f.rerun_fixes for f in result.failures), "shard")
        return 1
    console.print(f"done: {output}")
    return 0


def print_failure_hint(console: Console, failed: int, rerun_fixes: int, unit: str) -> None:
    """What to do about the failures: a rerun retries those of the machine; those of the input or the recipe (a
    missing column, a file that is no WARC) fail again until that changes, so rerunning alone is no advice for them."""
    if rerun_fixes:
        console.print(f"[red]{rerun_fixes} {unit}(s) failed on the machine (a lost worker, a full disk, an interruption): "
                      "rerun the same command to retry them[/]", soft_wrap=True)  # fmt: skip
    if failed > rerun_fixes:
        console.print(f"[red]{failed - rerun_fixes} {unit}(s) failed on their input or the recipe: fix what the lines "
                      "above name (or leave that input out), then rerun; finished work is kept[/]", soft_wrap=True)  # fmt: skip


def cmd_stats(args) -> int:
    from curation import stats

    try:
        totals = stats.stage_totals(args.output)
    except FileNotFoundError as error:
        print(f"curate: {error}", file=sys.stderr)
        return 2
    console = make_console()
    stats.print_funnel(totals, console)
    stats.print_passes(stats.load_passes(args.output), console)
    return 0


def cmd_tokenize(args) -> int:
    from rich.table import Table

    from curation.tokenize import tokenize_runs
    from shard_contract.folder_lock import FolderLocked

    console = make_console()
    if args.ray_address:
        from curation.ray_session import check_address

        check_address(args.ray_address)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("parts  {task.fields[tokens]:>13,} tokens  {task.fields[rate]:>10,.0f} tokens/s"), TimeElapsedColumn()]  # fmt: skip
    with Progress(*columns, console=console) as progress:
        bars = PartProgress(progress)
        try:
            held_out = {} if args.validation_fraction is None else {"validation_fraction": args.validation_fraction}
            result = tokenize_runs(args.output, args.tokenizer, args.vocab_size, sample_bytes=args.tokenizer_sample_bytes,
                                   seed=args.tokenizer_sample_seed, ray_address=args.ray_address, num_cpus=args.num_cpus,
                                   on_start=bars.start, on_part=bars, retrain_tokenizer=args.retrain_tokenizer, **held_out)  # fmt: skip
        except (FileNotFoundError, ValueError, FolderLocked) as error:
            print(f"curate: {error}", file=sys.stderr)
            return 2
    console.print(f"tokenizer: {result.tokenizer}", soft_wrap=True)
    if result.retokenize:
        runs = " ".join(args.output + result.retokenize)
        console.print(f"[yellow]{', '.join(result.retokenize)}: tokenized with the tokenizer this replaced; a mixture of "
                      f"them and these runs is refused until you run `curate tokenize {runs}`[/]", soft_wrap=True)  # fmt: skip
    if result.skipped:
        console.print(f"resumed: {result.skipped} part(s) were already tokenized and skipped")
    if result.removed:
        console.print(f"deleted {len(result.removed)} token part(s) of inputs the runs no longer have", soft_wrap=True)
    if result.stats:
        vocabulary = next(iter(result.stats.values()))["vocab_size"]
        table = Table(title=f"Tokens (one tokenizer, vocabulary {vocabulary:,})")
        for column in ("run", "source", "documents", "tokens", "held out: documents", "held out: tokens"):
            table.add_column(column, justify="left" if column in ("run", "source") else "right")
        for run_dir, stats in result.stats.items():
            for source, counts in stats["sources"].items():
                table.add_row(f"{run_dir}/tokens", source, f"{counts['documents']:,}", f"{counts['tokens']:,}",
                              f"{counts['validation_documents']:,}", f"{counts['validation_tokens']:,}")  # fmt: skip
        console.print(table)
    for failure in result.failures:
        console.print(f"[red]failed[/] {failure}", soft_wrap=True)
    if result.failures:
        print_failure_hint(console, len(result.failures), result.rerun_fixes, "part")
        return 1
    return 0


class PartProgress:
    """A rich bar per run: parts done/total, tokens and tokens per second."""

    def __init__(self, progress: Progress):
        self.progress, self.started, self.bars, self.tokens = progress, time.perf_counter(), {}, {}

    def start(self, parts_per_run: dict[str, int]) -> None:
        for run_dir, parts in parts_per_run.items():
            self.tokens[run_dir] = 0
            self.bars[run_dir] = self.progress.add_task(run_dir, total=parts, tokens=0, rate=0.0)

    def __call__(self, run_dir: str, part_stats: dict | None) -> None:
        if part_stats:
            self.tokens[run_dir] += sum(counts["tokens"] for counts in part_stats["sources"].values())
        rate = self.tokens[run_dir] / max(1e-9, time.perf_counter() - self.started)
        self.progress.update(self.bars[run_dir], advance=1, tokens=self.tokens[run_dir], rate=rate)


def cmd_quality(args) -> int:
    if args.quality_command == "train-model":
        return _train_model(args)
    from curation import quality
    from filters.langid import load_fasttext
    from filters.quality import Combiner, combiner_beside, signals

    try:
        if args.quality_command == "eval":
            pairs = quality.read_texts(args.labelled, args.text_field, args.label_field)
            model = load_fasttext(Path(args.model))
            texts, labels = [t for t, _ in pairs], [lab for _, lab in pairs]
            rankings = {"model (fastText)": quality.score(model, texts)}
            if combiner_beside(Path(args.model)).is_file():
                combiner = Combiner.load(combiner_beside(Path(args.model)))
                rankings["model + signals (its combiner)"] = combiner.scores(signals(texts, rankings["model (fastText)"]))
            scores = list(rankings.values())[-1]
            print(f"{args.model} on {args.labelled}: {quality.evaluate(scores, labels, args.threshold).line()}")
            rankings["length only (more words ranks higher)"] = quality.length_scores(texts, 1.0)
            for name, ranking in rankings.items():
                interval = quality.interval_text(quality.auc_interval(ranking, labels, seed=args.seed))
                print(f"  AUC {name}: {quality.auc(ranking, labels):.3f}  (95% bootstrap interval {interval}, "
                      f"{len(labels)} documents)")  # fmt: skip
            return 0
        if args.quality_command == "cv":
            examples = [pair for f in args.labelled for pair in quality.read_texts(f, args.text_field, args.label_field)]
            return _nested_cv(quality, examples, args)
        examples = [(t, 1) for f in args.positive for t, _ in quality.read_texts(f, args.text_field)]
        examples += [(t, 0) for f in args.negative for t, _ in quality.read_texts(f, args.text_field)]
        examples += [pair for f in args.labelled for pair in quality.read_texts(f, args.text_field, args.label_field)]
    except (ValueError, FileNotFoundError, KeyError) as error:
        print(f"curate: {error}", file=sys.stderr)
        return 2
    if len({label for _, label in examples}) < 2:
        print("curate: training needs both positive and negative examples", file=sys.stderr)
        return 2
    fit, held = quality.split(examples, args.holdout, args.seed) if args.holdout > 0 else (examples, [])
    settings = {"epoch": args.epoch, "lr": args.lr, "word_ngrams": args.word_ngrams}
    if args.select:
        settings, inner_auc = quality.select_settings(fit, quality.GRID, seed=args.seed, dim=args.dim, bucket=args.bucket)
        print(f"chosen by 4-fold CV on the {len(fit)} training documents: {settings} (mean AUC {inner_auc:.3f})")
    try:
        model, settings["lr"] = quality.train_halving_lr_on_nan(
            fit, args.out, dim=args.dim, bucket=args.bucket, threads=args.threads, seed=args.seed,
            quantize=args.quantize, cutoff=args.cutoff if args.quantize else 0, **settings)  # fmt: skip
    except RuntimeError as error:
        print(f"curate: {error} (--lr)", file=sys.stderr)
        return 1
    print(f"trained on {len(fit)} documents ({sum(label for _, label in fit)} positive) -> {args.out}")
    combiner = None
    if args.combine:
        with tempfile.TemporaryDirectory() as folder:
            out_of_fold = quality.out_of_fold_scores(fit, 4, args.seed, folder, dim=args.dim, bucket=args.bucket, **settings)
        combiner = quality.fit_combiner(fit, out_of_fold)
        combiner.save(combiner_beside(Path(args.out)))
        print(f"combiner (fastText + signals, fitted on 4-fold out-of-fold scores) -> {combiner_beside(Path(args.out))}")
    if held:
        texts, labels = [t for t, _ in held], [label for _, label in held]
        scores = quality.score(model, texts)
        print(f"held-out: {quality.evaluate(scores, labels).line()}")
        if combiner:
            print(f"held-out, with signals: {quality.evaluate(combiner.scores(signals(texts, scores)), labels).line()}")
    return 0


def _train_model(args) -> int:
    """`curate quality train-model`: the head, then its held-out scores beside fastText's on the same split."""
    import numpy as np
    import pyarrow as pa
    from scipy.stats import spearmanr

    from curation import quality, quality_model
    from filters.model_score import ModelScorer

    try:
        files = [path for pattern in args.labelled for path in sorted(glob.glob(pattern)) or [pattern]]
        pairs = [pair for f in files for pair in quality.read_texts(f, args.text_field, args.label_field)]
    except (ValueError, FileNotFoundError, KeyError) as error:
        print(f"curate: {error}", file=sys.stderr)
        return 2
    unique = list(dict(pairs).items())  # a text annotated twice (FineWeb's pilot repeats rows) counts once
    fit, held = quality.split(unique, args.holdout, args.seed)
    if len({label for _, label in fit}) < 2 or not held:
        print("curate: train-model needs two labels among the training documents and a held-out part (--holdout)",
              file=sys.stderr)  # fmt: skip
        return 2
    print(f"{len(pairs)} labelled documents, {len(unique)} distinct: fitting on {len(fit)}, scoring {len(held)} held out")
    try:
        quality_model.train_head(args.encoder, [t for t, _ in fit], [label for _, label in fit], args.task,
                                 args.max_tokens, args.out, args.pooling)  # fmt: skip
    except ValueError as error:
        print(f"curate: {error}", file=sys.stderr)
        return 2
    labels = np.array([label for _, label in held])
    texts = [t for t, _ in held]
    params = {"model_path": args.out, "max_tokens": args.max_tokens}
    stage_hint = f"model_path: {args.out}"
    if args.task == "classes":  # the top class's probability; quoted: a bare 1 is refused where "1" is not index 1
        params["positive_class"] = str(max(label for _, label in fit))
        stage_hint += f", positive_class: '{params['positive_class']}'"
    print(f"classifier -> {args.out} (model_score: {{{stage_hint}}})")
    head_scores = ModelScorer(ModelScorer.Params(**params)).process(
        pa.table({"id": [str(i) for i in range(len(texts))], "text": texts})).kept["model_score"].to_numpy()  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        binary = [(t, int(label >= args.positive_from)) for t, label in fit]
        model, _ = quality.train_halving_lr_on_nan(binary, f"{folder}/fasttext.bin", lr=0.5, seed=args.seed)
        fasttext_scores = np.array(quality.score(model, texts))
    positive = (labels >= args.positive_from).astype(int)
    print(f"held out ({len(held)} documents, {int(positive.sum())} with label >= {args.positive_from}):")
    for name, scores in (("head on the encoder", head_scores), ("fastText, same split", fasttext_scores)):
        rho = spearmanr(scores, labels).statistic
        rho_interval = _bootstrap(lambda i: spearmanr(scores[i], labels[i]).statistic, len(labels), args.seed)
        line = f"  {name:22s} Spearman {rho:.3f} {quality.interval_text(rho_interval)}"
        if 0 < positive.sum() < len(positive):
            interval = quality.interval_text(quality.auc_interval(scores, positive, seed=args.seed))
            line += f"   AUC of label >= {args.positive_from}: {quality.auc(scores, positive):.3f} {interval}"
        print(line)
    return 0


def _bootstrap(statistic, count: int, seed: int, resamples: int = 1000) -> tuple[float, float]:
    """A 95% percentile interval of statistic(indices) over resampled documents."""
    import numpy as np

    rng = np.random.default_rng(seed)
    values = [statistic(rng.integers(0, count, count)) for _ in range(resamples)]
    return tuple(float(v) for v in np.nanpercentile(values, [2.5, 97.5]))


def _nested_cv(quality, examples: list[tuple[str, int]], args) -> int:
    from rich.table import Table

    if len({label for _, label in examples}) < 2:
        print("curate: cross-validation needs both positive and negative examples", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results = quality.nested_cross_validate(examples, quality.GRID, args.outer, args.inner, args.seed,
                                            quantize_cutoff=args.cutoff if args.quantize else None)  # fmt: skip
    table = Table(title=f"Nested {args.outer}x{args.inner}-fold CV on {len(examples)} documents ({time.perf_counter() - started:.0f} s)")
    for column in ("outer fold", "chosen settings (inner CV)", "inner AUC", "held-out AUC", "fastText + signals AUC", "length-only AUC"):
        table.add_column(column, justify="left" if column.startswith("chosen") else "right")
    for fold, result in enumerate(results):
        chosen = " ".join(f"{k}={v}" for k, v in result.settings.items())
        table.add_row(str(fold), chosen, f"{result.inner_auc:.3f}", f"{result.auc:.3f}", f"{result.combined_auc:.3f}",
                      f"{result.length_auc:.3f}")  # fmt: skip
    names = ("inner_auc", "auc", "combined_auc", "length_auc")
    mean = {name: sum(getattr(r, name) for r in results) / len(results) for name in names}
    table.add_row("mean", "", f"{mean['inner_auc']:.3f}", f"[bold]{mean['auc']:.3f}[/]", f"[bold]{mean['combined_auc']:.3f}[/]",
                  f"{mean['length_auc']:.3f}")  # fmt: skip
    make_console().print(table)
    return 0


def cmd_extract(args) -> int:
    from fsspec.implementations.local import LocalFileSystem

    from curation.extraction_model import train_block_model
    from curation.extraction_sets import HTML_SETS, SET_NAMES, load_set
    from curation.io import write_json_atomic
    from filters.extract_blocks import MODEL_FILE

    try:
        pages = [page for name in SET_NAMES for page in load_set(name, Path(args.sets or HTML_SETS)) if page.split == "train"]
    except FileNotFoundError as error:
        print(f"curate extract: {error}; pass --sets", file=sys.stderr)
        return 2
    started = time.perf_counter()
    model, figures = train_block_model(pages, seed=args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(LocalFileSystem(), args.out, model.to_json())
    print(f"trained on {figures['pages']} pages ({figures['blocks']:,} blocks, {figures['content_share']:.0%} main "
          f"content) in {time.perf_counter() - started:.0f} s: threshold {figures['threshold']}, training-split F1 "
          f"{figures['train_f1']:.3f}; wrote {args.out}")  # fmt: skip
    if Path(args.out).resolve() != MODEL_FILE.resolve():
        print(f"the resiliparse_blocks backend reads the packaged model: `cp {args.out} {os.path.relpath(MODEL_FILE)}` "
              "to use it, then `python benchmarks/extraction_quality.py` scores it on the held-out pages")  # fmt: skip
    return 0


def cmd_sample(args) -> int:
    from curation.sources import sample

    paths = sample.generate(args.out, args.pages, args.files, args.seed)
    print(f"wrote {len(paths)} WARC file(s) and {sample.TRUTH_FILE} ({args.pages} pages) to {args.out}")
    return 0


def cmd_decontam(args) -> int:
    from pydantic import ValidationError
    from rich.table import Table

    from filters.benchmark_index import FORMATS, SHIPPED, BenchmarkSpec, NgramIndex

    console = make_console()
    if args.decontam_command == "formats":
        table = Table(title="Built-in benchmark formats")
        for column in ("format", "fields (alternatives with |)", "choices (a candidate each)", "item id", "ships"):
            table.add_column(column)
        for name, layout in sorted(FORMATS.items()):
            fields, choices = (" + ".join(" | ".join(f) for f in group or []) for group in (layout.fields, layout.choices))
            table.add_row(name, fields, choices, layout.id_field or "file:row", "yes" if name in SHIPPED else "")
        console.print(table)
        return 0
    specs = []
    for argument in args.benchmarks:
        name, _, path = argument.partition("=")
        try:
            specs.append(BenchmarkSpec(name=name, format=name, path=path or None))
        except ValidationError as error:
            console.print(f"[red]curate: --benchmarks {argument}: {error.errors()[0]['msg']}[/]")
            return 2
    started = time.perf_counter()
    try:
        index = NgramIndex.build(specs, args.ngram, args.min_words)
    except (FileNotFoundError, ValueError) as error:
        console.print(f"[red]curate: {error}[/]")
        return 2
    index.save(args.output)
    table = Table(title=f"Decontamination index ({args.ngram}-grams) in {args.output}, built in {time.perf_counter() - started:.1f} s")
    for column in ("benchmark", "items", "too short", "n-grams"):
        table.add_column(column, justify="left" if column == "benchmark" else "right")
    for name, counts in index.stats.items():
        table.add_row(name, f"{counts['items']:,}", f"{counts['too_short']:,}", f"{counts['ngrams']:,}")
    console.print(table)
    return 0


def cmd_report(args) -> int:
    from curation.report import render_html

    try:
        page = render_html(args.output, getattr(args, "also", []))
    except FileNotFoundError as error:
        print(f"curate: {error}", file=sys.stderr)
        return 2
    import fsspec

    from curation.io import write_text_atomic

    target = args.html or f"{args.output.rstrip('/')}/report.html"
    fs, path = fsspec.core.url_to_fs(target)
    write_text_atomic(fs, path, page)
    print(f"report: {target} ({len(page) / 1e6:.1f} MB)")
    return 0


def main(argv: list[str] | None = None, more: dict | None = None) -> int:
    """`more`: commands of the package above curation (`experiments`: ablate, and report with training runs), each
    {name: (help, add its arguments to the subparser, run it)}; an existing command's parser gets the arguments and
    the new run."""
    from curation.io import disk_full

    args = _parser(more).parse_args(argv)
    commands = {"run": cmd_run, "stats": cmd_stats, "tokenize": cmd_tokenize, "quality": cmd_quality, "decontam": cmd_decontam,
                "report": cmd_report, "sample": cmd_sample, "extract": cmd_extract}  # fmt: skip
    commands |= {name: run for name, (_, _, run) in (more or {}).items()}
    try:
        return commands[args.command](args)
    except KeyboardInterrupt:  # Ctrl-C: what finished is kept (atomic parts, the manifest), so one line says so
        print(f"curate {args.command}: stopped; rerun the same command to resume (finished work is kept)", file=sys.stderr)
        return 130
    except OSError as error:
        message = disk_full(error, getattr(args, "output", None) or getattr(args, "out", None) or os.getcwd())
        if message is None:
            raise
        print(f"curate: {message}", file=sys.stderr)
        return 1


def exit_script(code: int) -> NoReturn:
    """The end of a `curate` process: the objects still alive are left to the operating system instead of the
    interpreter's last garbage collections, which took 0.17 s of an 8,000-page run's ~7.7 s here (pyarrow's, Ray's,
    numpy's objects). atexit handlers, objects freed by their reference count and stdio flushing run as before;
    outputs are closed by the code that writes them, never left to the collector."""
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    exit_script(main())
