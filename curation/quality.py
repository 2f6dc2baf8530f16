"""Train and evaluate DCLM-style fastText quality classifiers (word bigrams, `__label__hq` vs `__label__cc`)."""

import ctypes
import gzip
import itertools
import json
import os
import random
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from filters.quality import NEGATIVE, POSITIVE, Combiner, fasttext_line, positive_probability, signals


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


def auc_interval(scores, labels, resamples: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the AUC: documents resampled with replacement (resamples that lack a class
    are drawn again), so a difference between two models can be told from the noise of a small labelled set."""
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int)
    rng, values = np.random.default_rng(seed), []
    while len(values) < resamples:
        pick = rng.integers(0, len(labels), len(labels))
        if 0 < labels[pick].sum() < len(pick):
            values.append(auc(scores[pick], labels[pick]))
    tail = (1 - level) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def interval_text(interval: tuple[float, float]) -> str:
    """`[low, high]`: `low-high` reads as a subtraction once low is negative (`-0.045-0.509`)."""
    low, high = interval
    return f"[{low:.3f}, {high:.3f}]"


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


DEFAULT_LR = 0.5
M_PERTURB = -6  # glibc's mallopt parameter: each new allocation's bytes are set to the complement of its value


@contextmanager
def zeroed_allocations():
    """New heap memory reads as zeros meanwhile, as in a fresh process. fastText's `uniform` fills one tenth of the
    input matrix per training thread (the rest stays as allocated) and this wheel allocates it uninitialized: with one
    thread, the last 90% (nearly all bigram rows) was what the process's heap last held, so a model trained after other
    work (a test suite) diverged at lr after lr where a fresh process's zeroed pages trained well. A libc without
    mallopt (macOS) is left as it is."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        yield
        return
    mallopt(M_PERTURB, 0xFF)
    try:
        yield
    finally:
        mallopt(M_PERTURB, int(os.environ.get("MALLOC_PERTURB_") or 0))  # the user's debugging setting, if any


def train(examples: list[tuple[str, int]], out: str, epoch: int = 50, lr: float = DEFAULT_LR, dim: int = 64, word_ngrams: int = 2,
          min_count: int = 1, bucket: int = 200_000, threads: int = 1, seed: int = 0, quantize: bool = False,
          cutoff: int = 0):  # fmt: skip
    """Train a supervised fastText model on (text, 1|0) and save it to `out`; `quantize` writes fastText's compressed
    format (.ftz: product-quantized, the `cutoff` most important rows kept and retrained), a few MB instead of
    (vocabulary + buckets) x dim floats."""
    import fasttext

    if not hasattr(fasttext, "train_supervised"):
        raise RuntimeError(
            "this `fasttext` module can only predict (another package installed fasttext-predict over it); "
            "for training run: pip install --force-reinstall --no-deps fasttext-numpy2-wheel==0.9.2"
        )
    rows = [f"{POSITIVE if label else NEGATIVE} {fasttext_line(text)}" for text, label in examples]
    random.Random(seed).shuffle(rows)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as handle, zeroed_allocations():
        handle.write("\n".join(rows) + "\n")
        handle.flush()
        model = fasttext.train_supervised(input=handle.name, epoch=epoch, lr=lr, dim=dim, wordNgrams=word_ngrams,
                                          minCount=min_count, bucket=bucket, thread=threads, seed=seed, verbose=0)  # fmt: skip
        if quantize:
            model.quantize(input=handle.name, qnorm=True, retrain=bool(cutoff), cutoff=cutoff, thread=threads)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    model.save_model(out)
    return model


def train_halving_lr_on_nan(examples: list[tuple[str, int]], out: str, lr: float, attempts: int = 4, say=print,
                            **train_args):  # fmt: skip
    """`train`, and where fastText diverges ("Encountered NaN": the learning rate is too high for these documents, and
    where it does depends on the CPU's floating point), again at half the rate, saying so: a user asked for a model."""
    for attempt in range(attempts):
        try:
            return train(examples, out, lr=lr, **train_args), lr
        except RuntimeError as error:
            if "NaN" not in str(error):
                raise
            if attempt == attempts - 1:
                raise RuntimeError(f"fastText diverged even at lr {lr:g}; pass a smaller lr") from error
            say(f"fastText diverged at lr {lr:g}; training again at lr {lr / 2:g}")
            lr /= 2


def score(model, texts: list[str]) -> list[float]:
    return [positive_probability(model, text) for text in texts]


def split(examples: list, holdout: float, seed: int) -> tuple[list, list]:
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    cut = int(round(len(shuffled) * (1 - holdout)))
    return shuffled[:cut], shuffled[cut:]


def folds(examples: list, k: int, seed: int) -> list[tuple[list, list]]:
    """k (training, held-out) splits of one seeded shuffle: held-out parts are disjoint and cover every example."""
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    return [([e for i, e in enumerate(shuffled) if i % k != fold], shuffled[fold::k]) for fold in range(k)]


def cross_validate(examples: list[tuple[str, int]], folds_k: int = 5, seed: int = 0, **train_args) -> list[float]:
    """AUC of each fold's held-out part, models trained on the other folds; NaN where training diverged (fastText
    stops with "Encountered NaN" when the learning rate is too high for the data)."""
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for fold, (trained, held) in enumerate(folds(examples, folds_k, seed)):
            try:
                model = train(trained, f"{folder}/fold{fold}.bin", seed=seed, **train_args)
            except RuntimeError as error:
                if "NaN" not in str(error):
                    raise
                results.append(float("nan"))
                continue
            results.append(auc(score(model, [t for t, _ in held]), [label for _, label in held]))
    return results


GRID = {"epoch": [10, 50], "lr": [0.1, 0.5], "word_ngrams": [1, 2]}


def settings_grid(grid: dict[str, list]) -> list[dict]:
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def select_settings(examples: list[tuple[str, int]], grid: dict[str, list], k: int = 4, seed: int = 0,
                    **fixed) -> tuple[dict, float]:  # fmt: skip
    """The grid point with the best mean k-fold AUC on `examples` (and that AUC): only these examples are seen. A point
    that diverged on any fold is never chosen."""
    scored = []
    for i, point in enumerate(settings_grid(grid)):
        mean = float(np.mean(cross_validate(examples, k, seed, **fixed, **point)))
        scored.append((-np.inf if np.isnan(mean) else mean, i, point))
    best_auc, _, best = max(scored, key=lambda row: (row[0], -row[1]))
    return best, best_auc


def length_scores(texts: list[str], sign: float) -> list[float]:
    """The baseline: a document's word count, with the sign that its training part favours."""
    return [sign * len(text.split()) for text in texts]


def fit_logistic(features: np.ndarray, labels, l2: float = 1.0, steps: int = 25) -> Combiner:
    """L2-regularized logistic regression by Newton steps on standardized features."""
    mean, std = features.mean(axis=0), features.std(axis=0) + 1e-9
    x = np.hstack([(features - mean) / std, np.ones((len(features), 1))])
    y, w = np.asarray(labels, dtype=float), np.zeros(x.shape[1])
    penalty = np.diag([l2] * (x.shape[1] - 1) + [0.0])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-x @ w))
        gradient = x.T @ (p - y) + penalty @ w
        hessian = x.T @ (x * (p * (1 - p))[:, None]) + penalty
        w -= np.linalg.solve(hessian, gradient)
    return Combiner(mean, std, w)


def out_of_fold_scores(examples: list[tuple[str, int]], k: int, seed: int, folder: str, say=print, lr: float = DEFAULT_LR,
                       **train_args) -> list[float]:  # fmt: skip
    """Each example's fastText score from a model that did not train on it: what a model on top may learn from."""
    result = [0.0] * len(examples)
    for fold, (trained, held) in enumerate(folds(list(range(len(examples))), k, seed)):
        model, _ = train_halving_lr_on_nan([examples[i] for i in trained], f"{folder}/oof{fold}.bin", lr, say=say, seed=seed, **train_args)
        for i, value in zip(held, score(model, [examples[i][0] for i in held])):
            result[i] = value
    return result


def fit_combiner(examples: list[tuple[str, int]], out_of_fold: list[float]) -> Combiner:
    """The regression of labels on SIGNALS, fastText's part taken from scores of models that never saw the document
    (as a new document is scored): trained on in-sample scores it would trust fastText far too much."""
    return fit_logistic(signals([text for text, _ in examples], out_of_fold), [label for _, label in examples])


@dataclass
class NestedFold:
    settings: dict
    inner_auc: float  # the chosen settings' mean AUC on the inner folds (optimistic: they were chosen on it)
    auc: float  # the outer held-out fold, never seen while choosing
    length_auc: float  # the length-only baseline on the same held-out fold
    combined_auc: float  # fastText score and the heuristic signals in a logistic regression, same held-out fold


def nested_cross_validate(examples: list[tuple[str, int]], grid: dict[str, list] = GRID, outer: int = 5, inner: int = 4,
                          seed: int = 0, quantize_cutoff: int | None = None, say=print, **fixed) -> list[NestedFold]:  # fmt: skip
    """Nested CV: per outer fold the settings are chosen by inner CV on its training part only, a model with them is
    trained on that whole part (quantized like the shipped model when `quantize_cutoff` is given) and scored on the
    held-out fold. The length baseline also takes its direction from the training part. Each outer AUC is thus an
    honest estimate of the whole procedure, selection and compression included. Where the chosen settings diverge on
    the whole part (fastText's NaN, which depends on the CPU's floating point), it trains again at half the rate as
    `curate quality train` does, and the fold's settings say the rate used."""
    results = []
    final = {"quantize": True, "cutoff": quantize_cutoff} if quantize_cutoff is not None else {}
    with tempfile.TemporaryDirectory() as folder:
        for fold, (trained, held) in enumerate(folds(examples, outer, seed)):
            settings, inner_auc = select_settings(trained, grid, inner, seed, **fixed)
            options = {**fixed, **settings, **final}
            model, used_lr = train_halving_lr_on_nan(trained, f"{folder}/outer{fold}.bin", options.pop("lr", DEFAULT_LR), say=say,
                                                     seed=seed, **options)  # fmt: skip
            settings = {**settings, "lr": used_lr}
            texts, labels = [t for t, _ in held], [label for _, label in held]
            sign = 1.0 if auc(length_scores([t for t, _ in trained], 1.0), [lab for _, lab in trained]) >= 0.5 else -1.0
            held_scores = score(model, texts)
            # the regression learns from scores of models that never saw the document, as the held-out fold is scored
            oof = out_of_fold_scores(trained, inner, seed, folder, say=say, **{**fixed, **settings})
            combined = fit_combiner(trained, oof).scores(signals(texts, held_scores))
            results.append(NestedFold(settings, inner_auc, auc(held_scores, labels), auc(length_scores(texts, sign), labels),
                                      auc(combined, labels)))  # fmt: skip
    return results
