"""The one Arrow schema that every stage reads and extends."""

import hashlib

import pyarrow as pa
import pyarrow.compute as pc

DOCUMENT_FIELDS = [
    pa.field("id", pa.string(), nullable=False),
    pa.field("url", pa.string()),
    pa.field("text", pa.string()),
    pa.field("source", pa.string()),
    pa.field("snapshot", pa.string()),
    pa.field("warc_file", pa.string()),
    pa.field("warc_record_id", pa.string()),
    pa.field("warc_offset", pa.int64()),  # where its record (its gzip member, in a .warc.gz) starts in warc_file
    pa.field("warc_digest", pa.string()),
    pa.field("warc_date", pa.string()),
]

# Raw payload columns written by the reader; the extraction stage consumes and removes them.
RAW_FIELDS = [
    pa.field("html", pa.binary()),
    pa.field("content_type", pa.string()),
    pa.field("charset", pa.string()),
]

READ_SCHEMA = pa.schema(DOCUMENT_FIELDS + RAW_FIELDS)


def document_id(record_id: str | None, url: str | None, digest: str | None) -> str:
    """Stable across runs: the same WARC record always gets the same id."""
    key = f"{record_id or url or ''}|{digest or ''}"
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:20]


def text_bytes(table: pa.Table) -> int:
    """UTF-8 bytes of the document payload: extracted text when present, raw HTML before extraction."""
    total = 0
    for column in ("text", "html"):
        if column in table.column_names and table.num_rows:
            total += int(pc.sum(pc.binary_length(table[column])).as_py() or 0)
    return total
