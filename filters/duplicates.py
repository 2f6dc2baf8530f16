"""The contract of corpus-wide duplicate removal: a stage that names candidate keys, and one that drops by cluster.

Whether two documents are duplicates depends on the whole corpus, so such a stage works in two halves. First
`candidate_keys` gives, per document, the keys under which it may collide with another (one content hash for
exact dedup, one hash per LSH band for MinHash) and, if pairs are to be verified, its shingle set; the runner's
corpus-wide pass (curation/dedup.py) shuffles the keys, verifies pairs and finds connected components. Then, per
shard, the pass attaches `dup_cluster`, `dup_cluster_size` and `dup_keep` and this stage drops every member but
the kept one, keeping the cluster under its own names (`exact_cluster` / `near_cluster` and their `_size`), so an
exact stage's clusters survive a near-duplicate stage after it. Both halves are plain functions of a table, tested
without Ray.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from filters.base import Annotation, Stage, StageParams

PRIORITY_BITS = 19  # which member a cluster keeps is encoded in the high bits of node ids (curation/dedup.py)
MAX_PRIORITY = (1 << PRIORITY_BITS) - 1
PASS_COLUMNS = ("dup_cluster", "dup_cluster_size", "dup_keep")  # the pass's answer, read and removed by the filter
SAMPLE_ONE_IN = 16  # clusters whose id hashes to 0 modulo this are sampled into stats, the same ones on every shard


class DuplicateParams(StageParams):
    keep: Literal["first", "longest", "quality"] = Field(
        "first", description="which member of a cluster stays: first seen, longest text, or highest quality_score"
    )
    partition_records: int = Field(
        2_000_000, gt=0, description="candidate keys per shuffle partition: bounds each worker's memory"
    )
    sample_clusters: int = Field(5, ge=0, description="clusters per shard listed (ids, URLs) in stats.json")


@dataclass
class CandidateKeys:
    rows: np.ndarray  # int64: the table row each key belongs to
    bands: np.ndarray  # int32: which band (0 for exact dedup)
    keys: np.ndarray  # uint64: documents sharing (band, key) are candidate duplicates
    shingles: list[np.ndarray] | None = None  # per row, sorted unique shingle hashes, when pairs are verified
    stats: dict = field(default_factory=dict)


def own_columns(prefix: str) -> dict[str, pa.DataType]:
    """A duplicate stage's cluster and cluster-size columns: each stage names its own, never another's."""
    return {f"{prefix}_cluster": pa.int64(), f"{prefix}_cluster_size": pa.int32()}


def size_bucket(size: int) -> str:
    """Cluster sizes in powers of two: 2, 3, 4-7, 8-15, ..."""
    if size <= 3:
        return str(size)
    low = 1 << (size.bit_length() - 1)
    return f"{low}-{2 * low - 1}"


class DuplicateFilter(Stage):
    Params: ClassVar[type[StageParams]] = DuplicateParams
    reason: ClassVar[str]
    requires = ("id", "text", *PASS_COLUMNS)
    adds: ClassVar[dict[str, pa.DataType]]  # own_columns(...) of the subclass
    removes = PASS_COLUMNS
    per_document = False  # its clusters are attached to a whole shard's rows

    def candidate_keys(self, table: pa.Table) -> CandidateKeys:
        raise NotImplementedError

    @property
    def keys_per_document(self) -> int:
        """Candidate keys one document makes: the pass sizes its partitions by it."""
        return 1

    @property
    def verify_threshold(self) -> float | None:
        """Jaccard a candidate pair must reach, or None to accept every candidate pair."""
        return None

    def priority(self, table: pa.Table) -> np.ndarray:
        """Per row, in [0, MAX_PRIORITY]: lower wins. Ties (and `first`) go to the earlier shard and row."""
        if self.params.keep == "first":
            return np.zeros(table.num_rows, dtype=np.int64)
        if self.params.keep == "longest":
            lengths = pc.fill_null(pc.utf8_length(table["text"]), 0).to_numpy(zero_copy_only=False)
            return MAX_PRIORITY - np.minimum(lengths.astype(np.int64), MAX_PRIORITY)
        if "quality_score" not in table.column_names:
            raise ValueError(f"stage {self.name!r} keeps the best `quality_score`, but no quality stage ran before it")
        scores = pc.fill_null(table["quality_score"], 0.0).to_numpy(zero_copy_only=False)
        return MAX_PRIORITY - np.rint(np.clip(scores, 0.0, 1.0) * MAX_PRIORITY).astype(np.int64)

    def annotate(self, table: pa.Table) -> Annotation:
        clusters = table["dup_cluster"].to_pylist()
        sizes = table["dup_cluster_size"].to_pylist()
        keeps = table["dup_keep"].to_pylist()
        reasons = [None if keep else self.reason for keep in keeps]
        histogram = Counter(size_bucket(size) for size, keep in zip(sizes, keeps) if keep and size > 1)
        urls = table["url"].to_pylist() if "url" in table.column_names else [None] * table.num_rows
        # the lowest sampled cluster ids: the same clusters on every shard, so their members join up in stats
        chosen = sorted({c for c in clusters if c is not None and c % SAMPLE_ONE_IN == 0})[: self.params.sample_clusters]
        sampled: dict[int, list] = {cluster: [] for cluster in chosen}
        for row, cluster in enumerate(clusters):
            if cluster in sampled:
                sampled[cluster].append({"id": table["id"][row].as_py(), "url": urls[row], "kept": keeps[row]})
        stats = {
            "cluster_sizes": dict(histogram),
            "cluster_samples": [{"cluster": cluster, "members": members} for cluster, members in sampled.items()],
        }
        cluster_column, size_column = self.adds
        return Annotation(reasons, {cluster_column: clusters, size_column: sizes}, stats)
