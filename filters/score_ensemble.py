"""Score ensemble: one column combining several scorers' columns (Nemotron-CC keeps a page by the highest of its three
classifiers' buckets), which `score_filter` then keeps by and `quality_buckets` buckets; nothing is dropped here and
every scorer's own column stays for mixing.

Scores on different scales are made comparable first: `scale: shard_rank` turns each column into the document's
percentile among its shard's documents (Nemotron-CC takes percentiles over its corpus; a shard is a sample of it), and
`buckets: N` cuts that 0-1 scale into integers 0..N-1 (Nemotron-CC's 20). `combine` is `max` or `mean` over the
columns. A document missing any column's score gets no combined score (null).
"""

from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from filters.base import Annotation, Stage, StageParams


class ScoreEnsembleParams(StageParams):
    columns: list[str] = Field(min_length=2, description="the score columns earlier stages (or the input) wrote")
    combine: Literal["max", "mean"] = Field("max", description="how the scaled scores are combined")
    scale: Literal["raw", "shard_rank"] = Field("shard_rank", description="raw: as they are; shard_rank: each "
                                                "document's percentile (0-1) among its shard's by that column")  # fmt: skip
    buckets: int | None = Field(None, ge=2, description="cut each scaled score into integers 0..buckets-1 first (needs shard_rank)")
    column: str = Field("ensemble_score", min_length=1, description="the combined score's column")

    @model_validator(mode="after")
    def buckets_need_ranks(self):
        if self.buckets is not None and self.scale != "shard_rank":
            raise ValueError("buckets cut a 0-1 scale: set scale: shard_rank with them")
        return self


class ScoreEnsemble(Stage):
    name = "score_ensemble"
    Params = ScoreEnsembleParams

    def __init__(self, params: ScoreEnsembleParams | None = None):
        super().__init__(params)
        self.adds = {self.params.column: pa.float64()}

    @property
    def requires(self) -> tuple[str, ...]:
        return ("id", *self.params.columns)

    @property
    def per_document(self) -> bool:
        """A percentile among the shard's documents needs the whole shard."""
        return self.params.scale == "raw"

    def annotate(self, table: pa.Table) -> Annotation:
        scaled = np.stack([self._scaled(table, column) for column in self.params.columns])
        missing = np.isnan(scaled).any(axis=0)
        combined = scaled.max(axis=0) if self.params.combine == "max" else scaled.mean(axis=0)
        values = [None if gone else float(value) for value, gone in zip(combined.tolist(), missing.tolist())]
        return Annotation([None] * table.num_rows, {self.params.column: values}, {"ensemble_unscored": int(missing.sum())})

    def _scaled(self, table: pa.Table, column: str) -> np.ndarray:
        if not pa.types.is_integer(table[column].type) and not pa.types.is_floating(table[column].type):
            raise ValueError(f"score_ensemble: column `{column}` is {table[column].type}, not a number")
        scores = pc.cast(table[column], pa.float64()).to_numpy()
        if self.params.scale == "raw":
            return scores
        scored = ~np.isnan(scores)
        ranks = np.full(len(scores), np.nan)
        if scored.any():  # the share of the shard's scored documents at or below it: ties share a rank
            ordered = np.sort(scores[scored])
            ranks[scored] = np.searchsorted(ordered, scores[scored], side="right") / scored.sum()
        if self.params.buckets is not None:
            ranks[scored] = np.minimum(np.floor(ranks[scored] * self.params.buckets), self.params.buckets - 1)
        return ranks
