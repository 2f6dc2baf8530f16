"""FineWeb's heuristic block: our `heuristics` stage vs datatrove's four filters, same documents, same process.

    python benchmarks/heuristics_vs_datatrove.py [--pages 3000]

Documents: WARC pages from shared/bench/make_bench_warc.py (real sentences) when ../shared is present, else the
sample snapshot; read, extracted with trafilatura and kept as English >= 0.65 (what reaches the heuristics in
FineWeb). Baseline: datatrove 0.10 GopherRepetitionFilter -> GopherQualityFilter -> C4QualityFilter(
filter_no_terminal_punct=False) -> FineWebQualityFilter, called per document. Needs `pip install datatrove==0.10.1`.
Prints docs/s of each, the ratio (goal >= 3x) and how many decisions differ (expected: 0).
"""

import argparse
import glob
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

SHARED = Path(__file__).resolve().parents[2] / "shared"


def english_texts(folder: str, pages: int) -> tuple[list[str], str]:
    maker, sentences = SHARED / "bench" / "make_bench_warc.py", SHARED / "data" / "langid" / "sentences"
    if maker.is_file() and sentences.is_dir():
        subprocess.run([sys.executable, str(maker), str(sentences), f"{folder}/bench.warc.gz", "--pages", str(pages),
                        "--seed", "1", "--files", "1"], check=True, capture_output=True)  # fmt: skip
        origin = "make_bench_warc.py"
    else:
        sample.generate(folder, pages=pages, files=1, seed=1)
        origin = "curate sample"
    tables = [WarcReader("bench").read(p).table for p in sorted(glob.glob(f"{folder}/*.warc.gz"))]
    extracted = HtmlExtractor().process(pa.concat_tables(tables)).kept
    english = LanguageFilter().process(extracted).kept
    return english["text"].to_pylist(), origin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        texts, origin = english_texts(folder, args.pages)
    theirs_judge = datatrove_reference()
    ours = HeuristicFilters()
    ours.setup()
    theirs_judge(texts[0]), ours.judge(texts[0])  # warm both tokenizers
    started = time.perf_counter()
    theirs = [theirs_judge(t) for t in texts]
    theirs_seconds = time.perf_counter() - started
    started = time.perf_counter()
    mine = [ours.judge(t) for t in texts]
    ours_seconds = time.perf_counter() - started
    differ = sum(a[0] != b[0] or (a[0] is None and a[1] != b[1]) for a, b in zip(theirs, mine))
    kept = sum(reason is None for reason, _ in mine)
    print(f"{len(texts)} English documents from {args.pages} pages ({origin}); {kept} pass all four filters; one core")
    print(f"{'datatrove 0.10 filters (baseline)':<36}{len(texts) / theirs_seconds:>8.0f} docs/s")
    print(f"{'heuristics stage':<36}{len(texts) / ours_seconds:>8.0f} docs/s")
    print(f"ratio: {theirs_seconds / ours_seconds:.2f}x; decisions that differ: {differ}")


if __name__ == "__main__":
    main()
