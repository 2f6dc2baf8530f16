"""pyarrow imports pandas (~0.28 s, ~48 MiB) the first time it converts Python objects, only to ask whether they are
pandas objects. A curation worker never hands pyarrow pandas objects, so before its first task it makes pyarrow's
first look find no pandas. pyarrow asks again, and imports pandas for real, whenever pandas is wanted (`to_pandas`,
`from_pandas`); code that imports pandas itself is unaffected.
"""

import sys
from importlib.abc import MetaPathFinder

import pyarrow as pa


class _NoPandas(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("pandas is hidden while pyarrow first looks for it", name=name)
        return None


def spare_workers_pandas() -> None:
    """Makes pyarrow's one-time look for pandas (its first `pa.array` of Python objects) find none; a no-op where
    pandas is already imported or pyarrow has already looked."""
    if "pandas" in sys.modules:
        return
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)
