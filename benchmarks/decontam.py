"""Decontamination: index build time, and documents/s of the lookup against a plain-Python n-gram set.

    python benchmarks/decontam.py [--docs 20000] [--synthetic-items 100000]

Benchmarks: HumanEval + GSM8K from ../shared/data/benchmarks when present, and a generated benchmark of
`--synthetic-items` items of 40-80 words (MMLU has 14k). Documents: pages of the sample snapshot with the real
items planted in 1% of them. Baseline, in the same process: the straightforward implementation (regex
normalization, a Python set of n-gram strings, one document at a time), checked to find the same documents.
"""

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curation.sources import sample  # noqa: E402
from filters.benchmark_index import BenchmarkSpec, NgramIndex, load_items  # noqa: E402
from filters.decontam import Decontaminator  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "benchmarks"
N = 13


def plain_words(text: str) -> list[str]:
    return re.sub(r"[^\w\s]|_", "", text.lower()).split()


def plain_lookup(items: list[str], texts: list[str]) -> set[int]:
    grams = set()
    for item in items:
        words = plain_words(item)
        grams.update(" ".join(words[i : i + N]) for i in range(len(words) - N + 1))
    hits = set()
    for doc, text in enumerate(texts):
        words = plain_words(text)
        if any(" ".join(words[i : i + N]) in grams for i in range(len(words) - N + 1)):
            hits.add(doc)
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--synthetic-items", type=int, default=100_000)
    args = parser.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="decontam-bench-") as work:
        folder = Path(work)
        specs = []
        if (DATA / "gsm8k" / "test.jsonl").exists():
            specs += [BenchmarkSpec(name="gsm8k", format="gsm8k", path=str(DATA / "gsm8k" / "test.jsonl")),
                      BenchmarkSpec(name="humaneval", format="humaneval", path=str(DATA / "humaneval" / "HumanEval.jsonl.gz"))]  # fmt: skip
        vocabulary = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(30_000)]
        with open(folder / "synthetic.jsonl", "w") as handle:
            for _ in range(args.synthetic_items):
                question = " ".join(rng.choices(vocabulary, k=rng.randint(40, 80)))
                handle.write(json.dumps({"question": question, "answer": "#### 1"}) + "\n")
        synthetic = BenchmarkSpec(name="synthetic", format="gsm8k", path=str(folder / "synthetic.jsonl"))

        print("## Index build (13-grams)\n")
        print("| benchmarks | items | n-grams | seconds |")
        print("|---|---|---|---|")
        (folder / "tiny.jsonl").write_text(json.dumps({"question": " ".join(vocabulary[:20]), "answer": "1"}) + "\n")
        NgramIndex.build([BenchmarkSpec(name="tiny", format="gsm8k", path=str(folder / "tiny.jsonl"))])  # compiles the kernels
        for chosen in ([specs] if specs else []) + [[synthetic]]:
            started = time.perf_counter()
            index = NgramIndex.build(chosen)
            seconds = time.perf_counter() - started
            items = sum(s["items"] for s in index.stats.values())
            print(f"| {' + '.join(s.name for s in chosen)} | {items:,} | {sum(len(k) for k, _ in index.keys.values()):,} | {seconds:.2f} |")

        sample.generate(folder / "sample", pages=3000, files=1, seed=3)
        bodies = [b for b in pq.read_table(folder / "sample" / "truth.parquet")["body"].to_pylist() if b]
        texts = [bodies[i % len(bodies)] for i in range(args.docs)]
        benchmark_items = [texts[0] for spec in (specs or [synthetic]) for _, texts in load_items(spec)]
        planted = sorted(rng.sample(range(args.docs), args.docs // 100))
        for doc in planted:
            middle = len(texts[doc]) // 2
            texts[doc] = texts[doc][:middle] + " " + rng.choice(benchmark_items) + " " + texts[doc][middle:]
        table = pa.table({"id": [str(i) for i in range(args.docs)], "url": [None] * args.docs, "text": texts})
        megabytes = sum(len(t.encode()) for t in texts) / 1e6
        stage = Decontaminator(Decontaminator.Params(benchmarks=specs or [synthetic]))
        stage.process(table.slice(0, 10))  # builds the index and compiles outside the timing
        started = time.perf_counter()
        result = stage.process(table)
        ours = time.perf_counter() - started
        found = {int(r["id"]) for r in result.stats["report"]}
        started = time.perf_counter()
        reference = plain_lookup(benchmark_items, texts)
        plain = time.perf_counter() - started
        print(f"\n## Lookup: {args.docs:,} sample pages ({megabytes:.0f} MB), {len(planted)} with a planted item, against "
              f"{' + '.join(s.name for s in specs or [synthetic])}\n")  # fmt: skip
        print("| implementation | seconds | docs/s | MB/s | documents flagged | planted found |")
        print("|---|---|---|---|---|---|")
        for name, seconds, hits in (("plain Python n-gram set (baseline)", plain, reference), ("decontam stage", ours, found)):
            print(f"| {name} | {seconds:.2f} | {args.docs / seconds:,.0f} | {megabytes / seconds:.1f} | {len(hits)} | {len(hits & set(planted))} / {len(planted)} |")
        print(f"\nspeed-up: **{plain / ours:.1f}x**; same documents flagged: {found == reference}")


if __name__ == "__main__":
    main()
