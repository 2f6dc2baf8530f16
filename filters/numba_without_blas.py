"""numba for our kernels, without the scipy.linalg import of its BLAS look (~0.25 s and ~15 MiB in each worker).

numba's array-math lowering, loaded by the first call of any compiled kernel (cached or not), imports
scipy.linalg.cython_blas once at its import to learn whether it may call BLAS for `np.correlate` and `np.convolve`.
Our kernels call neither, so that lowering is imported here, once per process, with numba's `ensure_blas` answering
"no BLAS" for that one look (numba's own function, not the import system, which other threads use too). Only that
choice stays: those two then run numba's plain loop, equal up to rounding. `np.dot` and `np.linalg` in a kernel still
work: numba looks for BLAS again when it compiles them, and imports scipy.linalg then. A process that imported the
lowering already keeps its BLAS.
"""

import importlib

import numba
from numba.np import linalg


def _no_blas() -> None:
    raise ImportError("numba's BLAS look is skipped: no kernel of ours uses it")


def _import_array_math() -> None:
    looks_for_blas = linalg.ensure_blas
    linalg.ensure_blas = _no_blas
    try:
        array_math = importlib.import_module("numba.np.arraymath")
    finally:
        linalg.ensure_blas = looks_for_blas
    array_math.ensure_blas = looks_for_blas


_import_array_math()
