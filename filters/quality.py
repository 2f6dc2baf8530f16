"""Model-based quality: a fastText classifier's probability of the high-quality label, kept by threshold or top fraction.

Reads our own models (`curate quality train`) and DCLM's released one alike: both label `__label__hq` vs `__label__cc`.
"""

from pathlib import Path

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator, model_validator

from filters.base import Annotation, Stage, StageParams
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


class QualityParams(StageParams):
    model_path: str | None = Field(None, description="fastText .bin/.ftz: ours from `curate quality train`, or DCLM's "
                                   "released classifier; none for the one shipped in the package")  # fmt: skip
    positive_label: str = POSITIVE
    threshold: float | None = Field(None, ge=0, le=1, description="keep documents scoring at least this")
    top_fraction: float | None = Field(None, gt=0, le=1, description="keep this best-scoring fraction of each shard")

    @field_validator("model_path")
    @classmethod
    def model_exists(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_file():
            raise ValueError(f"quality model not found: {value}")
        return value

    @model_validator(mode="after")
    def one_rule(self):
        if self.threshold is not None and self.top_fraction is not None:
            raise ValueError("give threshold or top_fraction, not both")
        return self


class QualityScorer(Stage):
    name = "quality"
    Params = QualityParams
    adds = {"quality_score": pa.float32()}

    def setup(self) -> None:
        self.model = load_fasttext(Path(self.params.model_path) if self.params.model_path else asset(*SHIPPED_MODEL))

    def annotate(self, table: pa.Table) -> Annotation:
        scores = np.array([positive_probability(self.model, t or "", self.params.positive_label) for t in table["text"].to_pylist()])
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
        return Annotation(reasons=reasons, columns={"quality_score": scores.astype(np.float32).tolist()})
