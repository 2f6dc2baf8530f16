"""Score filter: keep documents by a numeric column their input already has (FineWeb-Edu's `score`, a classifier's
output in Parquet documents), by a lowest score or as each shard's best-scoring fraction.

A document without a score (a null or NaN value, or a shard without the column) is dropped as `no_score`; one that
scores too low as `below_score`. With `top_fraction`, every document tied with the last one kept is kept too, so the
share kept may exceed the fraction (a shard of equal scores is kept whole).
"""

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from filters.base import Annotation, Stage, StageParams

NUMERIC = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_null)  # null: a column of no score


class ScoreFilterParams(StageParams):
    column: str = Field(min_length=1, description="the numeric column to keep documents by (e.g. `score`)")
    min: float | None = Field(None, description="keep documents scoring at least this")
    top_fraction: float | None = Field(None, gt=0, le=1, description="keep this best-scoring fraction of each shard's "
                                       "documents, and every document tied with the last one kept")  # fmt: skip

    @model_validator(mode="after")
    def one_rule(self):
        if (self.min is None) == (self.top_fraction is None):
            raise ValueError("give exactly one of min or top_fraction")
        return self


class ScoreFilter(Stage):
    name = "score_filter"
    Params = ScoreFilterParams
    requires = ("id",)

    @property
    def per_document(self) -> bool:
        """A lowest score judges each row alone; a top fraction needs the whole shard, so the runner joins its batches."""
        return self.params.top_fraction is None

    def annotate(self, table: pa.Table) -> Annotation:
        scores = self._scores(table)
        scored = ~np.isnan(scores)
        cut, stats = self.params.min, {}
        if cut is None:
            ranked = np.sort(scores[scored])[::-1]
            wanted = math.ceil(self.params.top_fraction * table.num_rows - 1e-9)  # 0.3 * 10 is 3.0000000000000004
            cut = ranked[min(wanted, len(ranked)) - 1] if len(ranked) else math.inf
            stats = {"score_cut": float(cut)} if len(ranked) else {}  # the shard's cut, in stats.json
        keep = scored & (scores >= cut)
        reasons = [None if k else "below_score" if s else "no_score" for k, s in zip(keep.tolist(), scored.tolist())]
        return Annotation(reasons, {}, stats)

    def _scores(self, table: pa.Table) -> np.ndarray:
        """The column as float64, NaN where a document has no score."""
        column = self.params.column
        if column not in table.column_names:
            return np.full(table.num_rows, np.nan)
        kind = table[column].type
        if not any(is_kind(kind) for is_kind in NUMERIC):
            raise ValueError(f"score_filter: column `{column}` is {kind}, not a number: set params.column to a numeric column")
        return pc.cast(table[column], pa.float64()).to_numpy()
