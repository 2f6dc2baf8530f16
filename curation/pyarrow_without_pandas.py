"""pyarrow imports pandas (~0.28 s, ~48 MiB) the first time it converts Python objects, only to ask whether they are
pandas objects. A curation worker hands pyarrow no pandas objects, so before its first task it makes that first look
find no pandas (`spare_workers_pandas`). Until pyarrow looks again (it does on `to_pandas`, `from_pandas` and
`let_pyarrow_use_pandas`), it converts as where pandas is not installed: a pandas object given to `pa.array` is a
plain sequence, and a nanosecond timestamp or duration becomes a `datetime` / `timedelta` (an error when not whole
microseconds) instead of pandas' Timestamp / Timedelta. Tables holding such times restore pandas first
(`keep_pandas_for_nanosecond_times`), so their conversions are unchanged.
"""

import sys
from importlib.abc import MetaPathFinder

import pyarrow as pa


class _NoPandas(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("pandas is hidden while pyarrow first looks for it", name=name)
        return None


_looked = False


def spare_workers_pandas() -> None:
    """Makes pyarrow's one-time look for pandas (its first `pa.array` of Python objects) find none; once per process,
    and never where pandas is already imported."""
    global _looked
    if _looked or "pandas" in sys.modules:
        return
    _looked = True
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)


def let_pyarrow_use_pandas() -> None:
    """pyarrow looks for pandas again (through the public `to_pandas`) and, pandas installed, converts as ever."""
    pa.table({}).to_pandas()


def keep_pandas_for_nanosecond_times(schema: pa.Schema) -> None:
    """Input columns holding nanosecond times (at any depth) convert to Python as they did before pandas was
    spared."""
    if any(_nanosecond_times(field.type) for field in schema):
        let_pyarrow_use_pandas()


def _nanosecond_times(dtype: pa.DataType) -> bool:
    if pa.types.is_timestamp(dtype) or pa.types.is_duration(dtype):
        return dtype.unit == "ns"
    if pa.types.is_dictionary(dtype):
        return _nanosecond_times(dtype.value_type)
    return any(_nanosecond_times(dtype.field(i).type) for i in range(dtype.num_fields))
