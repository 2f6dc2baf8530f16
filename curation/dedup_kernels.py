"""The compiled loops of curation/dedup.py's pass, apart so that the driver, which only plans the pass, never imports
numba (0.2 s, 55 MiB)."""

from filters.numba_without_blas import numba
import numpy as np


@numba.njit(cache=True)
def union_find(left, right, count):
    """Root (smallest index) of every index 0..count-1 after joining each left[i] with right[i]."""
    parent = np.arange(count)
    for i in range(len(left)):
        a, b = left[i], right[i]
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a < b:
            parent[b] = a
        elif b < a:
            parent[a] = b
    for i in range(count):
        root = i
        while parent[root] != root:
            root = parent[root]
        parent[i] = root
    return parent


@numba.njit(cache=True)
def jaccard(left, left_offsets, right, right_offsets):
    """Jaccard of sorted unique sets: left[left_offsets[i]:left_offsets[i+1]] against the same slice of right."""
    out = np.empty(len(left_offsets) - 1)
    for i in range(len(out)):
        a, a_end, b, b_end = left_offsets[i], left_offsets[i + 1], right_offsets[i], right_offsets[i + 1]
        size = (a_end - a) + (b_end - b)
        common = 0
        while a < a_end and b < b_end:
            if left[a] == right[b]:
                common += 1
                a += 1
                b += 1
            elif left[a] < right[b]:
                a += 1
            else:
                b += 1
        out[i] = common / (size - common) if size > common else 1.0
    return out
