"""The reader table: a recipe's `source.kind` to the class that reads one input file of it."""

import fsspec

from curation.recipe import SourceSpec
from curation.sources import ReadResult
from curation.sources.code_tree import CodeReader
from curation.sources.parquet_documents import ParquetReader
from curation.sources.text_corpus import TextReader
from curation.sources.warc import WarcReader

READERS = {"parquet": ParquetReader, "code": CodeReader, "warc": WarcReader, "text": TextReader}


def read_input(source: SourceSpec, snapshot: str, path: str) -> ReadResult:
    """One input file as documents, with `bytes_in` always set."""
    options = {}
    if source.kind == "warc":
        options = {"max_payload_bytes": source.max_payload_bytes}
    elif source.kind == "text" and "max_payload_bytes" in source.model_fields_set:  # else the reader's 50 MB
        options = {"max_file_bytes": source.max_payload_bytes}
    result = READERS[source.kind](snapshot, source.source, **options).read(path)
    if result.bytes_in is None:
        result.bytes_in = fsspec.core.url_to_fs(path)[0].size(path)
    return result
