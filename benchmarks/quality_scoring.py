"""Quality scoring throughput: the `quality` stage (Arrow table in, scored table out) vs bare fastText predict.

    python benchmarks/quality_scoring.py [--docs 20000] [--repeat 3]

The model is trained here on ../shared/data/quality/labelled_web_text.jsonl when present, else on the sample
snapshot's ground truth (clean pages vs spam). Baseline: `model.predict(text.replace("\\n", " "))` per document,
DCLM's scoring loop. Ratio = stage docs/s / baseline docs/s (goal >= 0.9).
"""

import argparse
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from curation import quality
from curation.sources import sample
from filters.quality import QualityScorer

LABELLED = Path(__file__).resolve().parents[2] / "shared" / "data" / "quality" / "labelled_web_text.jsonl"


def examples(folder: str) -> tuple[list[tuple[str, int]], str]:
    if LABELLED.is_file():
        return quality.read_texts(str(LABELLED), label_field="label"), LABELLED.name
    sample.generate(folder, pages=400, files=1, seed=2)
    truth = pq.read_table(f"{folder}/{sample.TRUTH_FILE}").to_pandas()
    picked = truth[truth.kind.isin(["clean", "spam"])]
    return [(body, int(kind == "clean")) for body, kind in zip(picked.body, picked.kind)], "sample snapshot truth"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        labelled, origin = examples(folder)
        model_path = f"{folder}/model.bin"
        model = quality.train(labelled, model_path)
        texts = [labelled[i % len(labelled)][0] for i in range(args.docs)]
        table = pa.table({"id": [str(i) for i in range(len(texts))], "text": texts})
        stage = QualityScorer(QualityScorer.Params(model_path=model_path, threshold=0.5))
        stage.process(table.slice(0, 10))

        def bare():
            return [model.predict(text.replace("\n", " ")) for text in texts]

        timings = {}
        for name, run in [("bare fastText predict (baseline)", bare), ("quality stage", lambda: stage.process(table))]:
            best = float("inf")
            for _ in range(args.repeat):
                started = time.perf_counter()
                run()
                best = min(best, time.perf_counter() - started)
            timings[name] = best
    words = sum(len(t.split()) for t in texts) / len(texts)
    print(f"{args.docs} documents (mean {words:.0f} words) from {origin}; one core; best of {args.repeat}")
    for name, seconds in timings.items():
        print(f"{name:<34}{args.docs / seconds:>10,.0f} docs/s")
    base, ours = timings["bare fastText predict (baseline)"], timings["quality stage"]
    print(f"ratio stage / bare: {base / ours:.2f}x")


if __name__ == "__main__":
    main()
