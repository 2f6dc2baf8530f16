"""A write that fails leaves no temporary beside its final name: on a full disk one would hold the last of the space,
and every failure should leave the folder as a rerun expects it (tests/test_run_folder.py does this on a real full
disk through the CLI)."""

import errno

import fsspec
import pyarrow as pa
import pytest

from curation import io

UNWRITABLE = pa.table({"gap": pa.array([pa.MonthDayNano([1, 2, 3])], pa.month_day_nano_interval())})  # no Parquet type


def temporaries(folder) -> list[str]:
    return [path.name for path in folder.rglob("*") if io.TMP_MARK in path.name]


def test_a_part_whose_writer_refuses_the_schema_leaves_no_temporary(tmp_path):
    """The file is opened before pyarrow's writer looks at the schema: abort must remove it all the same."""
    writer = io.ParquetPartWriter(fsspec.filesystem("file"), str(tmp_path / "part-00000.parquet"))
    with pytest.raises(NotImplementedError, match="month_day_nano_interval"):
        writer.write(UNWRITABLE)
    assert temporaries(tmp_path)  # what abort is for
    writer.abort()
    assert not list(tmp_path.iterdir())


def test_a_write_that_fails_at_its_rename_leaves_no_temporary(tmp_path, monkeypatch):
    """On an object store the rename is a copy, which a full bucket fails after the write succeeded."""
    fs = fsspec.filesystem("file")
    with pytest.raises(NotImplementedError):
        io.write_parquet_atomic(fs, str(tmp_path / "a.parquet"), UNWRITABLE)

    def full(fs, tmp, path):
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(io, "_rename", full)
    with pytest.raises(OSError, match="No space left"):
        io.write_json_atomic(fs, str(tmp_path / "manifest.json"), {"stages": {}})
    assert not list(tmp_path.iterdir())
