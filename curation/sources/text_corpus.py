"""Prose that is neither web nor code (books, papers, reference manuals, Wikipedia): one shard per directory or file.

`.txt` and `.md` files (UTF-8, or the charset they declare or that is detected) are one document each;
`.jsonl`/`.jsonl.gz` one per record with a `text` field and `.parquet` one per row of a `text` column (their `id` and
`url` are used when present). A file of no such suffix that starts with `<doc ` is WikiExtractor's output (`wiki_00`
in folders `AA/`, `AB/`, ...): one document per `<doc id url title>` … `</doc>` block, with the id `wiki-ID` and the
block's url, its text starting with the title line WikiExtractor repeats (the article's heading). What cannot be a
document is counted (`not_text`, `not_a_file`, `file_too_large`, `unreadable`, `binary_file`, `undecodable`,
`bad_json`, `bad_parquet`, `unclosed_doc`, `empty_text`) and named (its path, `PATH#n` for a record), never silently
skipped and never fatal to the shard: one bad file or line loses only itself.
"""

import gzip
import hashlib
import html
import io
import json
import os
import re
import zlib
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from curation.pyarrow_without_pandas import keep_pandas_for_nanosecond_times
from curation.schema import DOCUMENT_FIELDS
from curation.sources.local_files import decode, input_files, load_file
from curation.sources import ReadResult, displayable

SUFFIXES = (".txt", ".md", ".jsonl", ".jsonl.gz", ".parquet")
TEXT_SCHEMA = pa.schema(DOCUMENT_FIELDS)
Record = dict | tuple[str, int]  # a document's fields, or why a record is dropped and its bytes
WHOLE_FILE_REASONS = ("bad_parquet", "binary_file", "undecodable")  # a drop that names the file, not a record of it
WIKI_DOC = re.compile(r"^[ \t]*<doc\b[^>]*>", re.M)
WIKI_ATTRIBUTE = re.compile(r'\b(id|url)="([^"]*)"')


def supported(file: str) -> bool:
    return file.lower().endswith(SUFFIXES)


def wikiextractor(file: str) -> bool:
    """WikiExtractor's output has no suffix of its own (`wiki_00`): its first bytes tell."""
    if not os.path.isfile(file):  # a pipe would block the read
        return False
    try:
        with open(file, "rb") as handle:
            head = handle.read(1024)
    except OSError:
        return False
    return head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"<doc ")


def readable(file: str) -> bool:
    """A file the reader makes documents of; every other file of an input is counted as `not_text`."""
    return supported(file) or wikiextractor(file)


def _plain(data: bytes) -> Iterator[Record]:
    text, reason = decode(data)
    yield (reason, len(data)) if reason else {"text": text}


def _jsonl(data: bytes, compressed: bool) -> Iterator[Record]:
    """A bad line is counted and the next one read; a corrupt gzip stream keeps the lines before the damage."""
    try:
        for line in gzip.GzipFile(fileobj=io.BytesIO(data)) if compressed else data.splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                record["text"].encode()  # a string, and one without lone surrogates (`"\ud800"`) Arrow cannot hold
            except (ValueError, TypeError, KeyError, AttributeError):  # not JSON, not UTF-8, or no text field
                yield "bad_json", len(line)
                continue
            yield record
    except (OSError, EOFError, zlib.error):
        yield "unreadable", 0  # what the damage cost is not known


def _parquet(data: bytes) -> Iterator[Record]:
    """Rows of its `text` (and `id`, `url`) columns; a corrupt file or one without a string `text` column is a drop."""
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        table = parquet.read(columns=[c for c in ("text", "id", "url") if c in parquet.schema_arrow.names])
        kind = table.schema.field("text").type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise TypeError(f"text column of type {kind}")
        keep_pandas_for_nanosecond_times(table.schema)  # an id or url of such times converts as it always did
        rows = table.to_pylist()
    except (pa.ArrowException, KeyError, TypeError):
        yield "bad_parquet", len(data)
        return
    yield from rows


def _wikiextractor(data: bytes) -> Iterator[Record]:
    """A record per `<doc>` block; one cut off before its `</doc>` (a truncated file) is `unclosed_doc`."""
    text, reason = decode(data)
    if reason:
        yield reason, len(data)
        return
    heads = list(WIKI_DOC.finditer(text))
    if not heads:  # `<doc ` cut off before its `>`
        yield "unclosed_doc", len(data)
    for head, following in zip(heads, heads[1:] + [None]):
        body = text[head.end() : following.start() if following else len(text)]
        end = body.rfind("</doc>")
        if end < 0:
            yield "unclosed_doc", len(body.encode())
            continue
        attributes = {name: html.unescape(value) for name, value in WIKI_ATTRIBUTE.findall(head.group())}
        record = {"text": body[:end].strip(), "url": attributes.get("url")}
        if attributes.get("id"):
            record["id"] = f"wiki-{attributes['id']}"  # Wikipedia's page id: stable, and apart from the hashed ids
        yield record


def _records(file: str, data: bytes) -> Iterator[Record]:
    name = file.lower()
    if name.endswith(".parquet"):
        return _parquet(data)
    if name.endswith((".jsonl", ".jsonl.gz")):
        return _jsonl(data, compressed=name.endswith(".gz"))
    if name.endswith((".txt", ".md")):
        return _plain(data)
    return _wikiextractor(data)


class TextReader:
    def __init__(self, snapshot: str, source: str = "rest", max_file_bytes: int = 50_000_000):
        self.snapshot, self.source, self.max_file_bytes = snapshot, source, max_file_bytes

    def read(self, path: str) -> ReadResult:
        base = path if os.path.isdir(path) else os.path.dirname(path)
        result, rows, digest, size = ReadResult(TEXT_SCHEMA.empty_table()), [], hashlib.sha256(), 0
        for file in input_files(path, "text"):
            relative = displayable(os.path.relpath(file, base))  # a Latin-1 file name too is a url
            if not readable(file):  # not read: its size is listed, not counted in bytes_in
                result.drop("not_text", file, os.path.getsize(file) if os.path.isfile(file) else 0)
                continue
            file_size, data = load_file(file, self.max_file_bytes)
            size += file_size
            if isinstance(data, str):
                result.drop(data, file, file_size)
                continue
            digest.update(data)
            whole_file = relative.lower().endswith((".txt", ".md"))
            for number, record in enumerate(_records(file, data)):  # a dropped record is listed as FILE#number
                if isinstance(record, tuple):
                    reason, record_bytes = record
                    result.drop(reason, file if reason in WHOLE_FILE_REASONS else f"{file}#{number}", record_bytes)
                elif not (text := record.get("text") or "").strip():
                    result.drop("empty_text", file if whole_file else f"{file}#{number}", len(text.encode()))
                else:
                    rows.append(self._document(record, relative, number))
        result.table = pa.Table.from_pylist(rows, schema=TEXT_SCHEMA)
        result.sha256, result.bytes_in = digest.hexdigest(), size
        return result

    def _document(self, record: dict, relative: str, number: int) -> dict:
        """A record's own id and url when it has them; else ids stable across runs (file, record number, content)."""
        text, whole_file = record["text"], relative.lower().endswith((".txt", ".md"))
        key = f"{relative}#{number}|{hashlib.sha1(text.encode()).hexdigest()}"
        return {
            "id": str(record.get("id") or hashlib.sha1(key.encode()).hexdigest()[:20]),
            "url": str(record.get("url") or (relative if whole_file else f"{relative}#{number}")),
            "text": text, "source": self.source, "snapshot": self.snapshot, "warc_file": relative,
        }  # fmt: skip
