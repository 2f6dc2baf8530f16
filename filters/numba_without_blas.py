"""numba for our kernels, without the scipy.linalg it imports to look for BLAS (~0.25 s and ~15 MiB in each worker).

numba's array-math lowering, loaded by the first call of any compiled kernel (cached or not), imports
scipy.linalg.cython_blas to learn whether `np.dot` and `np.linalg` can run in compiled code. Our kernels call neither,
so that module is imported here, once per process, while scipy.linalg is hidden: numba then has no BLAS in this
process (a kernel calling `np.dot` would fail to compile, with numba's "scipy 0.16+ is required for linear algebra"),
and scipy.linalg imports as ever for any other code. A process that has scipy.linalg already loses nothing by it and
keeps numba's BLAS.
"""

import sys
from importlib.abc import MetaPathFinder


class _NoScipyLinalg(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "scipy.linalg" or name.startswith("scipy.linalg."):
            raise ModuleNotFoundError("scipy.linalg is hidden while numba looks for BLAS", name=name)
        return None


def _numba():
    finder = None if "scipy.linalg" in sys.modules else _NoScipyLinalg()
    if finder:
        sys.meta_path.insert(0, finder)
    try:
        import numba
        import numba.np.arraymath  # noqa: F401  (where numba looks for BLAS, once)
    finally:
        if finder:
            sys.meta_path.remove(finder)
    return numba


numba = _numba()
