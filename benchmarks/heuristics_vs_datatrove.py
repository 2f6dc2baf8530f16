"""FineWeb's heuristic block: our `heuristics` stage vs datatrove's four filters, same documents, same process.

    python benchmarks/heuristics_vs_datatrove.py [--pages 3000] [--before REV]

Documents: WARC pages from shared/bench/make_bench_warc.py (real sentences) when ../shared is present, else the
sample snapshot; read, extracted with trafilatura and kept as English >= 0.65 (what reaches the heuristics in
FineWeb). Baseline: datatrove 0.10 GopherRepetitionFilter -> GopherQualityFilter -> C4QualityFilter(
filter_no_terminal_punct=False) -> FineWebQualityFilter, called per document. Needs `pip install datatrove==0.10.1`.
Prints docs/s of each, the ratio (goal >= 3x) and how many decisions differ (expected: 0). With --before, the stage
as it was at git revision REV (e.g. f541c6c, before its numpy/numba rewrite) runs on the same documents too.
"""

import argparse
import glob
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from curation.sources import sample
from curation.sources.warc import WarcReader
from filters import HtmlExtractor, LanguageFilter
from filters.heuristics import HeuristicFilters, datatrove_reference

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def extracted_texts(folder: str, pages: int) -> tuple[pa.Table, str]:
    """The extracted pages of the benchmark input (every language) and where they came from."""
    maker, sentences = SHARED / "bench" / "make_bench_warc.py", SHARED / "data" / "langid" / "sentences"
    if maker.is_file() and sentences.is_dir():
        subprocess.run([sys.executable, str(maker), str(sentences), f"{folder}/bench.warc.gz", "--pages", str(pages),
                        "--seed", "1", "--files", "1"], check=True, capture_output=True)  # fmt: skip
        origin = "make_bench_warc.py"
    else:
        sample.generate(folder, pages=pages, files=1, seed=1)
        origin = "curate sample"
    tables = [WarcReader("bench").read(p).table for p in sorted(glob.glob(f"{folder}/*.warc.gz"))]
    return HtmlExtractor().process(pa.concat_tables(tables)).kept, origin


def stage_at(revision: str) -> HeuristicFilters:
    """The heuristics stage as filters/heuristics.py was at a git revision, loaded beside today's."""
    source = subprocess.run(["git", "show", f"{revision}:filters/heuristics.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout  # fmt: skip
    spec = importlib.util.spec_from_loader(f"heuristics_{revision}", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, f"{revision}:filters/heuristics.py", "exec"), module.__dict__)
    return module.HeuristicFilters()


def timed(judge, texts: list[str]) -> tuple[list, float]:
    """Decisions and docs/s of one pass, after one warm-up document (tokenizer, compiled kernels)."""
    judge(texts[0])
    started = time.perf_counter()
    decisions = [judge(t) for t in texts]
    return decisions, len(texts) / (time.perf_counter() - started)


def differ(theirs: list, ours: list) -> int:
    return sum(a[0] != b[0] or (a[0] is None and a[1] != b[1]) for a, b in zip(theirs, ours))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--before", metavar="REV", help="also time the stage as it was at this git revision")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        extracted, origin = extracted_texts(folder, args.pages)
    texts = LanguageFilter().process(extracted).kept["text"].to_pylist()
    theirs, theirs_rate = timed(datatrove_reference(), texts)
    stage = HeuristicFilters()
    stage.setup()
    mine, rate = timed(stage.judge, texts)
    kept = sum(reason is None for reason, _ in mine)
    print(f"{len(texts)} English documents from {args.pages} pages ({origin}); {kept} pass all four filters; one core")
    print(f"{'datatrove 0.10 filters (baseline)':<36}{theirs_rate:>8.0f} docs/s")
    if args.before:
        before = stage_at(args.before)
        before.setup()
        earlier, before_rate = timed(before.judge, texts)
        changed = differ(earlier, mine)
        print(f"{'heuristics stage at ' + args.before:<36}{before_rate:>8.0f} docs/s (decisions that differ from now: {changed})")
    print(f"{'heuristics stage':<36}{rate:>8.0f} docs/s")
    print(f"ratio: {rate / theirs_rate:.2f}x; decisions that differ: {differ(theirs, mine)}")


if __name__ == "__main__":
    main()
