"""Token shards and tokenizers on a local disk or object storage (`s3://`, `gs://`, ... through fsspec), so a
mixture can name the curated run where it lives. Local files are memory-mapped; remote ones are read whole."""

import glob as local_glob

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from shard_contract import file_digest


def _remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def glob(pattern: str) -> list[str]:
    """Files matching `pattern`, as paths (local) or URLs with their protocol (remote)."""
    if not _remote(pattern):
        return local_glob.glob(pattern)
    fs, _ = fsspec.core.url_to_fs(pattern)
    protocol = pattern.split("://", 1)[0]
    return [f"{protocol}://{path}" for path in fs.glob(pattern)]


def is_file(path: str) -> bool:
    fs, inner = fsspec.core.url_to_fs(path)
    return fs.isfile(inner)


def is_dir(path: str) -> bool:
    fs, inner = fsspec.core.url_to_fs(path)
    return fs.isdir(inner)


def read_text(path: str) -> str:
    with fsspec.open(path, "r", encoding="utf-8") as handle:
        return handle.read()


def sibling(path: str, name: str) -> str:
    """`name` in the folder of `path`."""
    return f"{path.rsplit('/', 1)[0]}/{name}"


def read_parquet(path: str, columns: list[str]) -> pa.Table:
    """One file through ParquetFile: pq.read_table would go through the dataset layer, whose first use imports
    pyarrow.dataset (a third of a second in every launcher and rank)."""
    if not _remote(path):
        return _read_columns(pq.ParquetFile(path, memory_map=True), path, columns)
    with fsspec.open(path, "rb") as handle:
        return _read_columns(pq.ParquetFile(handle, pre_buffer=True), path, columns)


def _read_columns(file: pq.ParquetFile, path: str, columns: list[str]) -> pa.Table:
    """ParquetFile.read skips a column the file lacks; pq.read_table refused it, and so does this."""
    missing = [column for column in columns if column not in file.schema_arrow.names]
    if missing:
        raise ValueError(f"{path} has no column {', '.join(missing)}")
    return file.read(columns=columns)


def column_names(path: str) -> list[str]:
    if not _remote(path):
        return pq.read_schema(path).names
    with fsspec.open(path, "rb") as handle:
        return pq.read_schema(handle).names


def digest(path: str) -> tuple[int, str]:
    """(bytes, sha256) of a shard, streamed from wherever it lives."""
    with fsspec.open(path, "rb") as handle:
        return file_digest(handle)
