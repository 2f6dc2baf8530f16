"""Atomic Parquet/JSON writes on any fsspec filesystem: a killed run never leaves a half file under a final name."""

import errno
import json
import os
import shutil
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

TMP_MARK = ".tmp-"


def _rename(fs, tmp: str, path: str) -> None:
    """tmp -> path. A local rename is atomic; an object store has none, but a single-object copy makes the final
    object appear whole or not at all (fsspec's generic mv would list prefixes on the way, slow on big buckets)."""
    if isinstance(fs, LocalFileSystem):
        fs.mv(tmp, path)
    else:
        fs.cp_file(tmp, path)
        fs.rm_file(tmp)


def _write_then_rename(fs, path: str, mode: str, write) -> None:
    """write(handle) into a temporary beside `path`, then rename it into place; a failed write (a full disk) removes
    its temporary, so it neither holds the space nor lies around."""
    tmp = f"{path}{TMP_MARK}{uuid.uuid4().hex}"
    try:
        with fs.open(tmp, mode) as handle:
            write(handle)
        _rename(fs, tmp, path)  # on an object store a copy, which a full bucket fails too
    except BaseException:
        if fs.exists(tmp):
            fs.rm(tmp)
        raise


def write_parquet_atomic(fs, path: str, table: pa.Table, **options) -> None:
    """`options`: more of pq.write_table's (e.g. use_dictionary for the columns where it pays). An empty table is
    written with no row group (see `_write_rows`)."""

    def write(handle) -> None:
        with pq.ParquetWriter(handle, table.schema, compression="zstd", **options) as writer:
            _write_rows(writer, table)

    _write_then_rename(fs, path, "wb", write)


def _write_rows(writer: pq.ParquetWriter, table: pa.Table) -> None:
    """Rows only: a file of no rows keeps its schema and no row group, because Hugging Face `datasets` takes a file's
    batch size from its first row group and fails on an empty one (a shard whose documents were all dropped would
    make a whole folder unloadable)."""
    if table.num_rows:
        writer.write_table(table)


class ParquetPartWriter:
    """A Parquet file written a table at a time under a temporary name, renamed to `path` by close(): a part
    appears whole or not at all. The first table's schema is the file's; empty tables add no row group."""

    def __init__(self, fs, path: str):
        self.fs, self.path = fs, path
        self.tmp = f"{path}{TMP_MARK}{uuid.uuid4().hex}"
        self.handle = self.writer = None

    def write(self, table: pa.Table) -> None:
        if self.writer is None:
            self.fs.makedirs(self.path.rsplit("/", 1)[0], exist_ok=True)
            self.handle = self.fs.open(self.tmp, "wb")
            self.writer = pq.ParquetWriter(self.handle, table.schema, compression="zstd")
        _write_rows(self.writer, table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.handle.close()
            _rename(self.fs, self.tmp, self.path)

    def abort(self) -> None:
        """Drop the temporary of a part that will not be finished (a failed shard; a full disk keeps no space)."""
        for closing in (self.writer, self.handle):
            try:
                if closing is not None:
                    closing.close()
            except Exception:  # whatever closing raises (a full disk fails its flush again), the temporary goes
                pass
        if self.handle is not None and self.fs.exists(self.tmp):  # opened even where ParquetWriter then refused the schema
            self.fs.rm(self.tmp)


def write_text_atomic(fs, path: str, text: str) -> None:
    _write_then_rename(fs, path, "w", lambda handle: handle.write(text))


def write_json_atomic(fs, path: str, data: object, compact: bool = False) -> None:
    """Indented for people to read, or `compact` for files rewritten often (4x faster to encode)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":")) if compact else json.dumps(data, indent=1, sort_keys=True)
    write_text_atomic(fs, path, text)


def read_json(fs, path: str) -> dict:
    with fs.open(path, "r") as handle:
        return json.load(handle)


def read_parquet(fs, path: str) -> pa.Table:
    with fs.open(path, "rb") as handle:
        return pq.read_table(handle)


def remove_temporaries(fs, folder: str, recursive: bool = True) -> None:
    """Leftovers of writes a killed run did not finish."""
    if not fs.exists(folder):
        return
    for path in fs.find(folder) if recursive else fs.ls(folder, detail=False):
        if TMP_MARK in path.rsplit("/", 1)[-1]:
            fs.rm(path)


def disk_full(error: BaseException, where: str) -> str | None:
    """One line for a full disk anywhere in the error's causes, naming the path and its free space; None otherwise."""
    while error is not None and not (isinstance(error, OSError) and error.errno == errno.ENOSPC):
        error = error.__cause__ or error.__context__
    if error is None:
        return None
    path = error.filename or where
    existing = os.path.abspath(path) if "://" not in path else None
    while existing and not os.path.exists(existing):
        existing = os.path.dirname(existing)
    free = f"{shutil.disk_usage(existing).free / 2**20:,.1f} MiB free" if existing else "free space unknown"
    return f"disk full writing {path} ({free}): free some space and rerun the same command to resume"
