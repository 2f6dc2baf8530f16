"""PII stage throughput vs plain Presidio per-document analysis, same documents, same process, equal recall checked.

    python benchmarks/pii_vs_presidio.py [--pages 1000]

Documents: the extracted English pages of the sample snapshot (8% carry planted emails, phones, IPs and cards),
plus ../shared/data/pii/synthetic_spans.json when present. Baseline: Presidio's AnalyzerEngine (same offline engine,
same recognizers) on every whole document, then the anonymizer. Ours: the `pii` stage with its pre-screen.
Prints docs/s of each, the ratio (goal >= 5x) and whether both found exactly the same spans.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from curation.sources import sample
from curation.sources.warc import WarcReader
from filters import HtmlExtractor, LanguageFilter
from filters.pii import PiiScrubber

SYNTHETIC = Path(__file__).resolve().parents[2] / "shared" / "data" / "pii" / "synthetic_spans.json"


def documents(pages: int) -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        paths = sample.generate(folder, pages=pages, files=1, seed=4)
        table = WarcReader("bench").read(str(paths[0])).table
    texts = LanguageFilter().process(HtmlExtractor().process(table).kept).kept["text"].to_pylist()
    if SYNTHETIC.is_file():
        texts += [record["full_text"] for record in json.loads(SYNTHETIC.read_text())]
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=1000)
    args = parser.parse_args()
    texts = documents(args.pages)
    plain = PiiScrubber(PiiScrubber.Params(prescreen=False))
    ours = PiiScrubber()
    plain.setup()
    ours.setup()
    timings, spans = {}, {}
    for name, stage in [("plain Presidio, whole documents (baseline)", plain), ("pii stage with pre-screen", ours)]:
        table = pa.table({"id": [str(i) for i in range(len(texts))], "text": texts})
        started = time.perf_counter()
        stage.process(table)
        timings[name] = time.perf_counter() - started
        spans[name] = [sorted((r.entity_type, r.start, r.end) for r in stage.find(t)) for t in texts]
    base, mine = timings.values()
    same = list(spans.values())[0] == list(spans.values())[1]
    found = sum(len(s) for s in list(spans.values())[1])
    print(f"{len(texts)} documents ({found} PII spans found); one core")
    for name, seconds in timings.items():
        print(f"{name:<44}{len(texts) / seconds:>8.1f} docs/s")
    print(f"ratio: {base / mine:.1f}x; identical spans found by both: {same}")


if __name__ == "__main__":
    main()
