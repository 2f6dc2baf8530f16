"""Language ID: the `langid` stage (lid.176, with CLD2 and langid.py voting where lid.176 is unsure) beside bare
lid.176 on the same documents, per language, and the speed of each.

    python benchmarks/langid_vote.py [--sentences ../shared/data/langid/sentences]

Documents: one sentence each, and five consecutive sentences each, of every language file. The vote's settings were
chosen looking only at the even-numbered documents; the odd-numbered ones are reported apart as held out.
Speed: documents/s of bare `model.predict` (one call per table) against the stage's `predict`, one core.
Single words: up to 30 words of each length (1 to 9+ letters) of every language file, seed 0, identified by the stage
with `min_letters: 0` and by bare lid.176: where too few letters leave nothing to decide (the stage's `min_letters`).
"""

import argparse
import random
import time
from collections import defaultdict
from pathlib import Path

from filters import LanguageFilter
from filters.langid import canonical

LOOK_ALIKE_GROUP = ("bs", "hr", "sr")


def documents(folder: Path, per_document: int) -> dict[str, list[str]]:
    corpus = {}
    for path in sorted(folder.glob("*.txt")):
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        corpus[path.stem] = [" ".join(lines[i : i + per_document]) for i in range(0, len(lines), per_document)]
    return corpus


def accuracy(decided: list[str], language: str, half: int | None) -> float:
    picked = [code for i, code in enumerate(decided) if half is None or i % 2 == half]
    return sum(code == language for code in picked) / len(picked)


def compare(stage: LanguageFilter, corpus: dict[str, list[str]]) -> None:
    texts = [text for docs in corpus.values() for text in docs]
    started = time.perf_counter()
    labels, _ = stage.model.predict([" ".join(text.split()) for text in texts], k=1)
    bare_rate = len(texts) / (time.perf_counter() - started)
    started = time.perf_counter()
    predicted = stage.predict(texts)
    stage_rate = len(texts) / (time.perf_counter() - started)
    bare = iter(canonical(label[0].removeprefix("__label__")) for label in labels)
    ours = iter(predicted)
    print(f"{'language':<10}{'bare all':>10}{'stage all':>10}{'bare odd':>10}{'stage odd':>10}")
    below, rows = [], []
    for language, docs in corpus.items():
        bare_codes = [next(bare) for _ in docs]
        stage_codes = [next(ours)[0] for _ in docs]
        row = [accuracy(bare_codes, language, None), accuracy(stage_codes, language, None),
               accuracy(bare_codes, language, 1), accuracy(stage_codes, language, 1)]  # fmt: skip
        rows.append(row)
        print(f"{language:<10}" + "".join(f"{value:>10.3f}" for value in row))
        if row[1] < 0.97 and language not in LOOK_ALIKE_GROUP:
            below.append(f"{language} {row[1]:.3f}")
    consulted = sum(voted for *_, voted in predicted) / len(predicted)
    means = [sum(row[i] for row in rows) / len(rows) for i in range(4)]
    print(f"{'mean':<10}" + "".join(f"{value:>10.3f}" for value in means))
    print(f"below 0.97 outside bs/hr/sr: {', '.join(below) or 'none'}")
    print(f"speed: bare predict {bare_rate:,.0f} docs/s, stage {stage_rate:,.0f} docs/s "
          f"({stage_rate / bare_rate:.2f}x); others consulted on {consulted:.0%} of documents")


def single_words(folder: Path) -> None:
    stage = LanguageFilter(LanguageFilter.Params(languages=None, min_letters=0))
    stage.setup()
    rng, right, total = random.Random(0), defaultdict(lambda: [0, 0]), defaultdict(int)
    for path in sorted(folder.glob("*.txt")):
        by_length = defaultdict(list)
        for word in path.read_text(encoding="utf-8").split():
            if word.isalpha():
                by_length[min(len(word), 9)].append(word)
        for length, words in sorted(by_length.items()):
            picked = rng.sample(words, min(30, len(words)))
            labels, _ = stage.model.predict(picked, k=1)
            right[length][0] += sum(language == path.stem for language, *_ in stage.predict(picked))
            right[length][1] += sum(canonical(label[0].removeprefix("__label__")) == path.stem for label in labels)
            total[length] += len(picked)
    print(f"\nsingle words by letters, {folder}\n{'letters':<10}{'words':>8}{'stage':>8}{'bare':>8}")
    for length in sorted(total):
        print(f"{str(length) + ('+' if length == 9 else ''):<10}{total[length]:>8}"
              f"{right[length][0] / total[length]:>8.3f}{right[length][1] / total[length]:>8.3f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=Path, default=Path(__file__).parents[1] / "../shared/data/langid/sentences")
    args = parser.parse_args()
    stage = LanguageFilter(LanguageFilter.Params(languages=None))
    stage.setup()
    for per_document in (1, 5):
        print(f"\n{per_document} sentence(s) per document, {args.sentences}")
        compare(stage, documents(args.sentences, per_document))
    single_words(args.sentences)


if __name__ == "__main__":
    main()
