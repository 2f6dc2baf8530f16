"""The compiled loops of curation/dedup.py's pass (in filters/kernels.c)."""

import numpy as np

from filters.compiled_kernels import pointer, kernels


def union_find(left: np.ndarray, right: np.ndarray, count: int) -> np.ndarray:
    """Root (smallest index) of every index 0..count-1 after joining each left[i] with right[i]."""
    left, right = np.ascontiguousarray(left, np.int64), np.ascontiguousarray(right, np.int64)
    if len(left) != len(right) or (len(left) and (min(left.min(), right.min()) < 0 or max(left.max(), right.max()) >= count)):
        raise ValueError(f"union_find: {len(left)} and {len(right)} indexes, all in 0..{count - 1} expected")
    parent = np.arange(count, dtype=np.int64)
    kernels().union_find(pointer(left), pointer(right), len(left), count, pointer(parent))
    return parent


def jaccard(left: np.ndarray, left_offsets: np.ndarray, right: np.ndarray, right_offsets: np.ndarray) -> np.ndarray:
    """Jaccard of sorted unique sets: left[left_offsets[i]:left_offsets[i+1]] against the same slice of right."""
    left, right = np.ascontiguousarray(left, np.uint32), np.ascontiguousarray(right, np.uint32)
    left_offsets, right_offsets = np.ascontiguousarray(left_offsets, np.int64), np.ascontiguousarray(right_offsets, np.int64)
    out = np.empty(len(left_offsets) - 1)
    kernels().jaccard(pointer(left), pointer(left_offsets), pointer(right), pointer(right_offsets), len(out), pointer(out))
    return out
