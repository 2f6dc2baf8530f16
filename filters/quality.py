"""Model-based quality: a fastText classifier's probability of the high-quality label, kept by threshold or top fraction.

Reads our own models (`curate quality train`) and DCLM's released one alike: both label `__label__hq` vs `__label__cc`.
A model trained with `--combine` has a combiner beside it (`<model>.combiner.json`): a logistic regression of the
fastText score together with the signals the heuristics look at, which ranks better on held-out folds (nested CV on
the shipped labels: 0.945 vs 0.921 AUC); `quality_score` is then its probability and `quality_fasttext` fastText's.
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator, model_validator

from filters.base import Annotation, Stage, StageParams
from filters.heuristics import STOP_WORDS, duplicates
from filters.langid import load_fasttext
from filters.packaged import asset

POSITIVE, NEGATIVE = "__label__hq", "__label__cc"
SHIPPED_MODEL = ("quality", "quality_dclm281.ftz")  # filters/assets/quality/MODEL.md: data, command, nested-CV AUC


def fasttext_line(text: str) -> str:
    """fastText reads one line per document: whitespace (newlines included) collapsed, as DCLM's scorer does."""
    return " ".join(text.split())


def positive_probability(model, text: str, positive: str = POSITIVE) -> float:
    labels, probs = model.predict(fasttext_line(text), k=-1)
    for label, prob in zip(labels, probs):
        if label == positive:
            return float(prob)
    return 0.0


SIGNALS = ("fasttext_logit", "log_words", "stop_word_share", "lines_ending_in_punctuation", "repeated_line_share",
           "mean_word_length")  # fmt: skip


def signals(texts: list[str], fasttext_scores) -> np.ndarray:
    """One row of SIGNALS per document: the fastText score as a logit beside what the pipeline's heuristics look at."""
    rows = []
    for text, probability in zip(texts, fasttext_scores):
        words = text.split() or [""]
        lines = [line.strip() for line in text.split("\n") if line.strip()] or [""]
        p = min(max(float(probability), 1e-4), 1 - 1e-4)
        rows.append([np.log(p / (1 - p)), np.log1p(len(words)), sum(w.lower() in STOP_WORDS for w in words) / len(words),
                     sum(line[-1:] in ".!?\"'" for line in lines) / len(lines), duplicates(lines)[0] / len(lines),
                     sum(map(len, words)) / len(words)])  # fmt: skip
    return np.array(rows, dtype=float).reshape(-1, len(SIGNALS))


@dataclass
class Combiner:
    """A logistic regression over standardized SIGNALS (`curate quality train --combine` fits it)."""

    mean: np.ndarray
    std: np.ndarray
    weights: np.ndarray  # one per signal, then the bias

    def scores(self, features: np.ndarray) -> np.ndarray:
        standardized = np.hstack([(features - self.mean) / self.std, np.ones((len(features), 1))])
        return 1 / (1 + np.exp(-(standardized @ self.weights)))

    def save(self, path: Path) -> None:
        record = {"signals": list(SIGNALS), "mean": self.mean.tolist(), "std": self.std.tolist(), "weights": self.weights.tolist()}
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: Path) -> "Combiner":
        try:
            record = json.loads(path.read_text())
            if record["signals"] != list(SIGNALS):
                raise ValueError(f"signals {record['signals']} are not this version's {list(SIGNALS)}")
            combiner = cls(*(np.asarray(record[key], dtype=float) for key in ("mean", "std", "weights")))
        except (OSError, KeyError, TypeError, ValueError) as error:
            raise ValueError(f"cannot read the quality combiner {path}: {error}") from None
        shapes = (combiner.mean.shape, combiner.std.shape, combiner.weights.shape)
        if shapes != ((len(SIGNALS),), (len(SIGNALS),), (len(SIGNALS) + 1,)):
            raise ValueError(f"cannot read the quality combiner {path}: wrong number of weights")
        return combiner


def combiner_beside(model_path: Path) -> Path:
    return model_path.with_suffix(".combiner.json")


class QualityParams(StageParams):
    model_path: str | None = Field(None, description="fastText .bin/.ftz: ours from `curate quality train`, or DCLM's "
                                   "released classifier; none for the one shipped in the package")  # fmt: skip
    positive_label: str = POSITIVE
    threshold: float | None = Field(None, ge=0, le=1, description="keep documents scoring at least this")
    top_fraction: float | None = Field(None, gt=0, le=1, description="keep this best-scoring fraction of each shard")
    combiner: str = Field("auto", description="auto: the model's `.combiner.json` beside it where there is one (the "
                          "shipped model has); none: fastText's score alone; or the path of a combiner")  # fmt: skip

    @field_validator("model_path")
    @classmethod
    def model_exists(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_file():
            raise ValueError(f"quality model not found: {value}")
        return value

    @field_validator("combiner")
    @classmethod
    def combiner_exists(cls, value: str) -> str:
        if value not in ("auto", "none") and not Path(value).is_file():
            raise ValueError(f"quality combiner not found: {value}")
        return value

    @model_validator(mode="after")
    def one_rule(self):
        if self.threshold is not None and self.top_fraction is not None:
            raise ValueError("give threshold or top_fraction, not both")
        return self


class QualityScorer(Stage):
    name = "quality"
    Params = QualityParams
    adds = {"quality_score": pa.float32(), "quality_fasttext": pa.float32()}

    @property
    def per_document(self) -> bool:
        """A threshold judges each row alone; a top fraction is of the whole shard, so the runner joins its batches
        (a WARC file's pages arrive 250 at a time)."""
        return self.params.top_fraction is None

    def loaded_files(self) -> list[str]:
        """The model and combiner the recipe names (the shipped ones change only with the package)."""
        model = self.params.model_path
        beside = combiner_beside(Path(model)) if model else None
        combiner = {"auto": str(beside) if beside and beside.is_file() else None, "none": None}.get(self.params.combiner, self.params.combiner)
        return [path for path in (model, combiner) if path]

    def setup(self) -> None:
        model_path = Path(self.params.model_path) if self.params.model_path else asset(*SHIPPED_MODEL)
        self.model = load_fasttext(model_path)
        combiner = {"auto": combiner_beside(model_path), "none": None}.get(self.params.combiner, Path(self.params.combiner))
        self.combiner = Combiner.load(combiner) if combiner is not None and combiner.is_file() else None

    def annotate(self, table: pa.Table) -> Annotation:
        texts = [text or "" for text in table["text"].to_pylist()]
        fasttext_scores = np.array([positive_probability(self.model, text, self.params.positive_label) for text in texts])
        scores = self.combiner.scores(signals(texts, fasttext_scores)) if self.combiner else fasttext_scores
        if self.params.threshold is not None:
            reasons = [None if s >= self.params.threshold else "quality_below_threshold" for s in scores]
        elif self.params.top_fraction is not None and len(scores):
            keep = int(np.ceil(self.params.top_fraction * len(scores)))
            cutoff_rank = np.argsort(-scores, kind="stable")[:keep]
            kept = np.zeros(len(scores), dtype=bool)
            kept[cutoff_rank] = True
            reasons = [None if k else "quality_not_top_fraction" for k in kept]
        else:
            reasons = [None] * len(scores)
        columns = {"quality_score": scores.astype(np.float32).tolist(), "quality_fasttext": fasttext_scores.astype(np.float32).tolist()}
        return Annotation(reasons=reasons, columns=columns)
