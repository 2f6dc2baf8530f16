"""MinHash LSH near-duplicate removal, FineWeb's way by default: word 5-grams of `simplify_text`, 112 hashes as
14 bands x 8 rows, one document kept per connected cluster.

Two documents become candidates when all rows of one band agree: with Jaccard s that happens with probability
1 - (1 - s^rows)^bands (about 0.92 at s = 0.8 and 0.05 at s = 0.5 for 14 x 8). `verify: true` then computes the
true Jaccard of the shingle sets of each candidate pair and drops pairs under `threshold`, which removes the
false positives the S-curve lets through. Set `bands` and `rows` to null to have them chosen for `threshold`
(datasketch's weighting of false positives against false negatives).
"""

from functools import cached_property

import numpy as np
import pyarrow as pa
from pydantic import Field, model_validator

from filters.duplicates import CandidateKeys, DuplicateFilter, DuplicateParams, own_columns
from filters.normalization import Normalization, normalized_bytes

_FNV_PRIME = np.uint64(0x100000001B3)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def optimal_bands(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows) minimizing the false-positive area below `threshold` plus the false-negative area above it."""
    grid = np.linspace(0.0, 1.0, 1001)
    best, best_error = (1, 1), np.inf
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            probability = 1 - (1 - grid**rows) ** bands
            below, above = grid <= threshold, grid >= threshold
            error = np.trapezoid(probability[below], grid[below]) + np.trapezoid(1 - probability[above], grid[above])
            if error < best_error:
                best, best_error = (bands, rows), error
    return best


class MinhashParams(DuplicateParams):
    num_perm: int = Field(112, gt=0, le=1024)
    bands: int | None = Field(14, gt=0, description="LSH bands; with rows, set both to null to choose them for threshold")
    rows: int | None = Field(8, gt=0, description="hashes per band")
    ngram: int = Field(5, gt=0, description="words per shingle")
    normalization: Normalization = Field("fineweb", description="whitespace | lower | fineweb")
    seed: int = Field(1, ge=0, description="datasketch's seed: the permutations are those of MinHash(seed=...)")
    scheme: str = Field("affine32", pattern="^(affine32|legacy)$", description="datasketch's permutation scheme")
    threshold: float = Field(0.8, gt=0, lt=1, description="target Jaccard: for verify and for choosing bands/rows")
    verify: bool = Field(False, description="check each candidate pair's true Jaccard against threshold")

    @model_validator(mode="after")
    def bands_fit(self) -> "MinhashParams":
        if (self.bands is None) != (self.rows is None):
            raise ValueError("give both bands and rows, or neither to have them chosen for threshold")
        if self.bands is None:
            self.bands, self.rows = optimal_bands(self.threshold, self.num_perm)
        if self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands x rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}")
        return self


class MinHasher:
    """Signatures of word n-grams, equal to `datasketch.MinHash(num_perm, seed, scheme=...)` fed the same shingles
    (the n-gram's words joined by single spaces, UTF-8)."""

    def __init__(self, num_perm: int = 112, seed: int = 1, scheme: str = "affine32", ngram: int = 5):
        from filters.minhash_kernel import permutations

        self.num_perm, self.seed, self.scheme, self.ngram = num_perm, seed, scheme, ngram
        self.a, self.b = permutations(num_perm, seed, scheme)

    def signatures(self, buffer: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For the normalized documents `buffer[offsets[i]:offsets[i+1]]` (see `normalized_bytes`): documents x
        num_perm uint32 signatures, the shingle hashes, and each document's offsets into them."""
        from filters.minhash_kernel import sha1_hash32_many, shingle_bounds, signatures

        shingle_offsets, starts, ends = shingle_bounds(buffer, offsets, self.ngram)
        hashes = sha1_hash32_many(buffer, starts, ends)
        return signatures(hashes, shingle_offsets, self.a, self.b, self.scheme == "legacy"), hashes, shingle_offsets


def band_keys(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """documents x bands uint64: FNV-1a over the band's rows, seeded by the band, then a final avalanche."""
    keys = np.tile((np.arange(bands, dtype=np.uint64) + np.uint64(1)) * _GOLDEN, (len(signatures), 1))
    banded = signatures[:, : bands * rows].reshape(len(signatures), bands, rows).astype(np.uint64)
    for row in range(rows):
        keys = (keys ^ banded[:, :, row]) * _FNV_PRIME
    keys ^= keys >> np.uint64(29)
    return keys * _GOLDEN


class MinhashDedup(DuplicateFilter):
    name = "minhash"
    Params = MinhashParams
    reason = "near_duplicate"
    adds = own_columns("near")

    @cached_property
    def hasher(self) -> MinHasher:
        """Built at the first document, not in setup(): the driver readies the stage to plan its pass and needs none."""
        params = self.params
        return MinHasher(params.num_perm, params.seed, params.scheme, params.ngram)

    @property
    def keys_per_document(self) -> int:
        return self.params.bands

    @property
    def verify_threshold(self) -> float | None:
        return self.params.threshold if self.params.verify else None

    def candidate_keys(self, table: pa.Table) -> CandidateKeys:
        self.ready()
        params = self.params
        buffer, offsets = normalized_bytes(table["text"].to_pylist(), params.normalization)
        sigs, hashes, shingle_offsets = self.hasher.signatures(buffer, offsets)
        rows = np.flatnonzero(np.diff(shingle_offsets) > 0)
        keys = band_keys(sigs[rows], params.bands, params.rows)
        shingles = None
        if params.verify:
            shingles = [np.unique(hashes[shingle_offsets[row] : shingle_offsets[row + 1]]) for row in range(table.num_rows)]
        return CandidateKeys(
            rows=np.repeat(rows, params.bands),
            bands=np.tile(np.arange(params.bands, dtype=np.int32), len(rows)),
            keys=keys.reshape(-1),
            shingles=shingles,
            stats={"empty_text": table.num_rows - len(rows), "shingles": int(shingle_offsets[-1])},
        )
