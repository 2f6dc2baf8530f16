"""Quality buckets: a named bucket per document from a score column, so a mixture can train on `web` with
`bucket: hq` in an annealing phase. Nothing is dropped.

Buckets are lower bounds checked from the highest down; a document below all of them (or without a score) gets
`below`. With the default edges on `quality_score`: hq >= 0.8, mq >= 0.5, lq otherwise.
"""

import pyarrow as pa
from pydantic import Field

from filters.base import Annotation, Stage, StageParams


class BucketParams(StageParams):
    column: str = Field("quality_score", description="any numeric column an earlier stage added")
    buckets: dict[str, float] = Field({"hq": 0.8, "mq": 0.5}, min_length=1, description="bucket name -> lowest score it takes")
    below: str = Field("lq", description="the bucket of documents under every edge or without a score")


class QualityBuckets(Stage):
    name = "quality_buckets"
    Params = BucketParams
    adds = {"bucket": pa.string()}

    @property
    def requires(self) -> tuple[str, ...]:
        return ("id", "text", self.params.column)

    def annotate(self, table: pa.Table) -> Annotation:
        edges = sorted(self.params.buckets.items(), key=lambda item: -item[1])
        scores = table[self.params.column].to_pylist()
        names = [next((name for name, low in edges if score is not None and score >= low), self.params.below) for score in scores]
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        return Annotation([None] * len(names), {"bucket": names}, {"buckets": counts})
