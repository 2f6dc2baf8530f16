"""Exact deduplication: documents whose normalized text is identical form one cluster, of which one is kept.

The key is a 64-bit BLAKE2b digest of the normalized text (whitespace by default, so re-wrapped copies match;
`lower` or `fineweb` also match case and punctuation variants). Collisions at 64 bits are negligible below
billions of documents, so no pair is verified.
"""

import hashlib

import numpy as np
import pyarrow as pa
from pydantic import Field

from filters.duplicates import CandidateKeys, DuplicateFilter, DuplicateParams, own_columns
from filters.normalization import Normalization, normalize_batch


class ExactDedupParams(DuplicateParams):
    normalization: Normalization = Field("whitespace", description="whitespace | lower | fineweb")


class ExactDedup(DuplicateFilter):
    name = "dedup_exact"
    Params = ExactDedupParams
    reason = "exact_duplicate"
    adds = own_columns("exact")

    def candidate_keys(self, table: pa.Table) -> CandidateKeys:
        texts = normalize_batch(table["text"].to_pylist(), self.params.normalization)
        rows = np.array([row for row, text in enumerate(texts) if text], dtype=np.int64)
        keys = np.array(
            [int.from_bytes(hashlib.blake2b(texts[row].encode("utf-8"), digest_size=8).digest(), "little") for row in rows],
            dtype=np.uint64,
        )
        return CandidateKeys(rows, np.zeros(len(rows), dtype=np.int32), keys, stats={"empty_text": len(texts) - len(rows)})
