"""Language ID: fastText lid.176 called once per document (the `langid` stage before) vs once per table (now).

    python benchmarks/langid_batch.py [--pages 3000]

Documents: every extracted page of heuristics_vs_datatrove.py's input, all languages. Prints docs/s of each way
(bare lid.176 per document is the baseline), how many of the documents lid.176 decides alone get another score
than from it (none should) and how many languages the stage decided otherwise (canonical codes, the script rule, the
vote where lid.176 is unsure).
"""

import argparse
import tempfile
import time

from heuristics_vs_datatrove import extracted_texts

from filters import LanguageFilter


def one_call_per_document(model, texts: list[str]) -> list[tuple[str, float]]:
    """The stage's predictions as it made them before: a fastText call per document."""
    pairs = []
    for text in texts:
        labels, scores = model.predict(" ".join(text.split()), k=1)
        pairs.append((labels[0].removeprefix("__label__"), float(scores[0])))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        table, origin = extracted_texts(folder, args.pages)
    texts = [text for text in table["text"].to_pylist() if text and text.strip()]
    stage = LanguageFilter()
    stage.setup()
    started = time.perf_counter()
    before = one_call_per_document(stage.model, texts)
    before_rate = len(texts) / (time.perf_counter() - started)
    started = time.perf_counter()
    batched = stage.predict(texts)
    batched_rate = len(texts) / (time.perf_counter() - started)
    started = time.perf_counter()
    stage.process(table)
    stage_rate = table.num_rows / (time.perf_counter() - started)
    differ = sum(score != ours for (_, score), (_, ours, voted) in zip(before, batched) if not voted)
    decided = sum(language != ours for (language, _), (ours, _, _) in zip(before, batched))
    consulted = sum(voted for *_, voted in batched)
    print(f"{len(texts)} extracted documents from {args.pages} pages ({origin}); one core")
    print(f"{'predict, one call per document':<36}{before_rate:>8.0f} docs/s")
    print(f"{'predict, one call per table':<36}{batched_rate:>8.0f} docs/s")
    print(f"{'langid stage (process)':<36}{stage_rate:>8.0f} docs/s")
    print(f"ratio: {batched_rate / before_rate:.2f}x; lid.176 scores that differ where it decides alone: {differ}; languages the stage decided "
          f"otherwise than bare lid.176 (nb for no, zh/ja by script, votes): {decided}; others consulted on {consulted}")


if __name__ == "__main__":
    main()
