"""PII stage throughput vs plain Presidio per-document analysis, same documents, same process, equal recall checked.

    python benchmarks/pii_vs_presidio.py [--pages 1000]

Documents: the extracted English pages of the sample snapshot (8% carry planted emails, phones, IPs and cards),
plus ../shared/data/pii/synthetic_spans.json when present. Baseline: Presidio's AnalyzerEngine (same offline engine,
same recognizers) on every whole document, then the anonymizer. Ours: the `pii` stage with its pre-screen.
Prints docs/s of each, the ratio (goal >= 5x) and whether both found exactly the same spans, over all documents and
for each set apart: web pages seldom hold PII, while every synthetic record does (a worst case for the pre-screen).
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


def documents(pages: int) -> dict[str, list[str]]:
    with tempfile.TemporaryDirectory() as folder:
        paths = sample.generate(folder, pages=pages, files=1, seed=4)
        table = WarcReader("bench").read(str(paths[0])).table
    sets = {"sample pages": LanguageFilter().process(HtmlExtractor().process(table).kept).kept["text"].to_pylist()}
    if SYNTHETIC.is_file():
        sets["synthetic_spans.json"] = [record["full_text"] for record in json.loads(SYNTHETIC.read_text())]
    return sets


def timed(stage: PiiScrubber, texts: list[str]) -> tuple[float, list]:
    table = pa.table({"id": [str(i) for i in range(len(texts))], "text": texts})
    started = time.perf_counter()
    stage.process(table)
    seconds = time.perf_counter() - started
    return seconds, [sorted((r.entity_type, r.start, r.end) for r in stage.find(t)) for t in texts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=1000)
    args = parser.parse_args()
    sets = documents(args.pages)
    sets["all"] = [text for texts in sets.values() for text in texts]
    plain = PiiScrubber(PiiScrubber.Params(prescreen=False))
    ours = PiiScrubber()
    plain.setup()
    ours.setup()
    for stage in (plain, ours):  # phonenumbers loads each region's metadata on first use: not part of either rate
        timed(stage, sets["all"][:: max(1, len(sets["all"]) // 50)])
    print(f"{'documents':<26}{'n':>6}{'spans':>7}{'Presidio docs/s':>17}{'pii stage docs/s':>18}{'ratio':>8}  same spans")
    for name, texts in sets.items():
        base_seconds, base_spans = timed(plain, texts)
        our_seconds, our_spans = timed(ours, texts)
        found = sum(map(len, our_spans))
        print(f"{name:<26}{len(texts):>6}{found:>7}{len(texts) / base_seconds:>17.1f}{len(texts) / our_seconds:>18.1f}"
              f"{base_seconds / our_seconds:>7.1f}x  {base_spans == our_spans}")
    print("baseline: plain Presidio on whole documents (same engine and recognizers); one core")

if __name__ == "__main__":
    main()
