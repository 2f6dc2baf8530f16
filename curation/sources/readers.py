"""The reader table: a recipe's `source.kind` to the class that reads one input file of it, imported when a file of
that kind is read (the code reader alone loads go-enry, 11 MiB, in every worker of a web run otherwise)."""

from collections.abc import Iterator
from importlib import import_module

import fsspec
import pyarrow as pa

from curation.recipe import SourceSpec
from curation.sources import ReadResult
from curation.sources.html_pages import html_input

READERS = {
    "parquet": ("curation.sources.parquet_documents", "ParquetReader"),
    "code": ("curation.sources.code_repositories", "CodeReader"),
    "warc": ("curation.sources.warc", "WarcReader"),
    "text": ("curation.sources.text_corpus", "TextReader"),
    "html": ("curation.sources.html_pages", "HtmlReader"),
}


def _reader(source: SourceSpec, snapshot: str, path: str):
    """The reader of `path`'s kind: a `warc` source reads a local folder or page as HTML pages, so one run can mix
    WARC files and folders of pages."""
    kind = "html" if source.kind == "warc" and html_input(path) else source.kind
    options = {}
    if kind in ("warc", "html"):
        options = {"max_payload_bytes": source.max_payload_bytes}
    elif kind == "text" and "max_payload_bytes" in source.model_fields_set:  # else the reader's 50 MB
        options = {"max_file_bytes": source.max_payload_bytes}
    module, name = READERS[kind]
    return getattr(import_module(module), name)(snapshot, source.source, **options)


def read_input(source: SourceSpec, snapshot: str, path: str) -> ReadResult:
    """One input file as documents, with `bytes_in` always set."""
    result = _reader(source, snapshot, path).read(path)
    if result.bytes_in is None:
        result.bytes_in = fsspec.core.url_to_fs(path)[0].size(path)
    return result


def read_batches(source: SourceSpec, snapshot: str, path: str, result: ReadResult) -> Iterator[pa.Table]:
    """One input (a file; a folder of pages) as tables of at most `source.batch_documents` documents where its reader
    streams (WARC/WET, HTML pages), else as one table; `result` gets the drop counts (and the dropped files), sha256 and
    `bytes_in` once the input is read."""
    reader = _reader(source, snapshot, path)
    if hasattr(reader, "read_batches"):
        yield from reader.read_batches(path, source.batch_documents, result)
    else:
        whole = reader.read(path)
        result.dropped.update(whole.dropped)
        result.removed += whole.removed
        result.sha256, result.bytes_in = whole.sha256, whole.bytes_in
        yield whole.table
    if result.bytes_in is None:
        result.bytes_in = fsspec.core.url_to_fs(path)[0].size(path)
