"""Documents already extracted, as Parquet files with a `text` column: rerun later stages (dedup, PII, ...) on a
corpus from elsewhere or on another run's output without WARC files."""

import hashlib
from collections import Counter

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curation.schema import DOCUMENT_FIELDS
from curation.sources import ReadResult


def text_column(column: pa.ChunkedArray, path: str) -> pa.ChunkedArray:
    """The `text` column as strings. Binary text is read as UTF-8: writers such as Hive, Impala and older Spark store
    strings as bare bytes (Spark's `binaryAsString` reads them back the same way); bytes that are not UTF-8 or a column
    of another type are one line naming the file."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        raise ValueError(f"{path}: its `text` column is {column.type}, not text; write the documents as strings")
    try:
        return column.cast(pa.string())
    except pa.ArrowInvalid:
        raise ValueError(f"{path}: its `text` column is binary and not UTF-8; decode it to strings (from its real "
                         "encoding) and write the file again") from None  # fmt: skip


class ParquetReader:
    def __init__(self, snapshot: str, source: str = "web"):
        self.snapshot, self.source = snapshot, source

    def read(self, path: str) -> ReadResult:
        """Rows with text become documents (missing schema columns are null; `id` defaults to file and row), rows
        without text are dropped as `empty_text`."""
        digest = hashlib.sha256()
        with fsspec.open(path, "rb") as handle:
            data = handle.read()
        digest.update(data)
        table = pq.read_table(pa.BufferReader(data))
        if "text" not in table.column_names:
            raise ValueError(f"{path}: a Parquet input needs a `text` column; it has {table.column_names}")
        table = table.set_column(table.column_names.index("text"), "text", text_column(table["text"], path))
        name = path.rsplit("/", 1)[-1]
        if "id" not in table.column_names:
            ids = [hashlib.sha1(f"{name}#{row}".encode()).hexdigest()[:20] for row in range(table.num_rows)]
            table = table.append_column("id", pa.array(ids, pa.string()))
        defaults = {"source": self.source, "snapshot": self.snapshot, "warc_file": path}
        for field in DOCUMENT_FIELDS:
            if field.name not in table.column_names:
                table = table.append_column(field.name, pa.array([defaults.get(field.name)] * table.num_rows, field.type))
        has_text = pc.fill_null(pc.greater(pc.utf8_length(table["text"]), 0), False)
        dropped = Counter({"empty_text": table.num_rows - pc.sum(has_text).as_py()} if table.num_rows else {})
        return ReadResult(table.filter(has_text), +dropped, digest.hexdigest())
