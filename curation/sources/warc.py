"""A WARC/WET reader that survives bad input.

fastwarc raises `OSError: Gzip decompression error` at the first corrupt gzip member and the rest of the
file is lost, so this reader walks gzip members itself: a corrupt member is counted and skipped by
resyncing at the next gzip header, a truncated record is counted, and every good record after it is kept.
Common Crawl writes one gzip member per record, which is what makes resyncing lose only the bad record.
"""

import base64
import hashlib
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import brotli  # installed with resiliparse (its fastwarc needs it)
import fsspec
import pyarrow as pa

from curation.schema import READ_SCHEMA, document_id
from curation.sources import ReadResult

GZIP_MAGIC = b"\x1f\x8b\x08"
INFLATE_PIECE = 1 << 16  # feed the inflater in pieces: copying the whole read buffer per member is quadratic
HTML_TYPES = ("text/html", "application/xhtml+xml")


@dataclass
class WarcRecord:
    headers: dict[str, str]  # lower-cased names
    block: bytes
    offset: int = 0  # where the record starts in the data it was parsed from


class _NotAMember(Exception):
    """Bytes that look like a gzip magic but cannot start a member (reserved flags): garbage, not a lost member."""


def _gzip_header_length(buf: bytearray) -> int | None:
    """Length of the gzip member header at the start of buf (RFC 1952), None if buf ends inside it."""
    if len(buf) < 10:
        return None
    flags, pos = buf[3], 10
    if flags & 0xE0:
        raise _NotAMember("reserved gzip flags set")
    if flags & 4:  # FEXTRA
        if len(buf) < pos + 2:
            return None
        pos += 2 + int.from_bytes(buf[pos : pos + 2], "little")
    for flag in (8, 16):  # FNAME, FCOMMENT: zero-terminated
        if flags & flag:
            zero = buf.find(b"\0", pos)
            if zero < 0:
                return None
            pos = zero + 1
    if flags & 2:  # FHCRC
        pos += 2
    return pos if pos <= len(buf) else None


def iter_gzip_members(stream, chunk_size: int = 1 << 20) -> Iterator[tuple[bytes, str | None, int]]:
    """Yield (decompressed member, problem, offset): problem names what was lost, None for a member read whole;
    offset is where the member starts in the file (Common Crawl's index gives records by it).

    Each member is inflated as raw deflate after parsing its header, so the inflater never reads past the
    member's end (zlib's gzip mode does, and fails on whatever follows). Every damaged range is counted once:
    bytes before the next gzip header (`garbage_bytes`, e.g. a member whose magic was hit), each member whose
    deflate data or CRC is bad (`corrupt_gzip`, then the reader resyncs at the next header), and a member cut off
    inside its trailer (`truncated_gzip`, its records kept). A member cut inside its data yields what it holds, and
    the record parser counts the cut record.
    """
    buf = bytearray()
    at_eof = False
    dropped = 0  # bytes of the file before buf[0]

    def read_more() -> bool:
        nonlocal at_eof
        if at_eof:
            return False
        chunk = stream.read(chunk_size)
        if not chunk:
            at_eof = True
            return False
        buf.extend(chunk)
        return True

    in_lost_member = False  # the bytes after a corrupt member's header belong to it, not to a new garbage range
    while True:
        while len(buf) < 10 and read_more():
            pass
        if not buf:
            return
        if not buf.startswith(GZIP_MAGIC):
            found = buf.find(GZIP_MAGIC, 1)
            while found < 0 and read_more():
                found = buf.find(GZIP_MAGIC, 1)
            if not in_lost_member:
                yield b"", "garbage_bytes", dropped
            in_lost_member = True
            skipped = found if found >= 0 else len(buf)
            del buf[:skipped]
            dropped += skipped
            continue
        parts = []
        try:
            header = _gzip_header_length(buf)
            while header is None and read_more():
                header = _gzip_header_length(buf)
            if header is None and buf.find(GZIP_MAGIC, 1) < 0:
                yield b"", "truncated_gzip", dropped
                return
            if header is None:  # a damaged header claims more bytes than the file has left
                raise zlib.error("gzip header runs past the end of the file")
            inflater = zlib.decompressobj(-zlib.MAX_WBITS)
            fed = header
            while not inflater.eof:
                if fed >= len(buf) and not read_more():
                    break
                piece = bytes(buf[fed : fed + INFLATE_PIECE])
                fed += len(piece)
                parts.append(inflater.decompress(piece))
            end = fed - len(inflater.unused_data)
            while inflater.eof and len(buf) < end + 8 and read_more():
                pass
            data = b"".join(parts)
            if inflater.eof and len(buf) >= end + 8:
                if int.from_bytes(buf[end : end + 4], "little") != zlib.crc32(data):
                    raise zlib.error("gzip CRC mismatch")
        except _NotAMember:
            del buf[:1]  # scanned on as part of the garbage range it sits in
            dropped += 1
            continue
        except zlib.error:
            yield b"", "corrupt_gzip", dropped
            in_lost_member = True
            del buf[:1]
            dropped += 1
            continue
        if not inflater.eof and buf.find(GZIP_MAGIC, 1) > 0:
            # damaged data can inflate on past the member's end without an error and swallow every member after
            # it: lose this member only and resync at the next header
            yield b"", "corrupt_gzip", dropped
            in_lost_member = True
            del buf[:1]
            dropped += 1
            continue
        in_lost_member = False
        if not inflater.eof:  # cut inside its data: the record parser counts the cut record
            yield (data, None, dropped) if data else (b"", "truncated_gzip", dropped)
            return
        if len(buf) < end + 8:  # cut inside its trailer: the records are whole, the CRC is lost
            yield data, "truncated_gzip", dropped
            return
        del buf[: end + 8]
        yield data, None, dropped
        dropped += end + 8


def iter_records(data: bytes) -> Iterator[tuple[WarcRecord | None, str | None]]:
    """Parse the WARC records in one decompressed member (or a whole uncompressed file)."""
    pos = 0
    while pos < len(data):
        if not data.startswith(b"WARC/", pos):
            if data[pos:].strip(b"\r\n") == b"":
                return
            following = data.find(b"WARC/1.", pos + 1)
            yield None, "garbage_bytes"
            if following < 0:
                return
            pos = following
            continue
        header_end = data.find(b"\r\n\r\n", pos)
        if header_end < 0:
            yield None, "truncated_record"
            return
        headers = {}
        for line in data[pos:header_end].split(b"\r\n")[1:]:
            name, sep, value = line.partition(b":")
            if sep:
                headers[name.strip().lower().decode("latin-1")] = value.strip().decode("utf-8", "replace")
        try:
            length = int(headers["content-length"])
        except (KeyError, ValueError):
            yield None, "bad_warc_header"
            following = data.find(b"WARC/1.", pos + 1)
            if following < 0:
                return
            pos = following
            continue
        start = header_end + 4
        block = data[start : start + length]
        after = start + length
        if len(block) < length or not (after >= len(data) or data.startswith(b"\r\n", after)):
            yield None, "truncated_record"
            following = data.find(b"\r\nWARC/1.", start)
            if following < 0:
                return
            pos = following + 2
            continue
        yield WarcRecord(headers, block, pos), None
        pos = after
        while data.startswith(b"\r\n", pos):
            pos += 2


def _dechunk(body: bytes) -> bytes:
    """The body without its chunked transfer coding, or as stored where it is not chunks: recorders such as pywb and
    node-warc store the body de-chunked but keep the header (warcio keeps those bodies too). A chunk is a hex size line
    of at most 64 bytes ending in CRLF (warcio's test) and its data followed by CRLF; a body cut inside its chunks keeps
    what it holds, and the trailers after the last chunk are not body."""
    out, pos, end = [], 0, len(body)
    while pos < end:
        line_end = body.find(b"\n", pos, pos + 64)
        if line_end <= pos or body[line_end - 1] != 13:  # no CRLF-ended size line
            return body
        try:
            size = int(body[pos : line_end - 1].split(b";")[0], 16)
        except ValueError:
            return body
        if size < 0:
            return body
        if size == 0:
            break
        pos = line_end + 1 + size
        out.append(body[line_end + 1 : pos])
        if pos < end and not body.startswith(b"\r\n", pos):
            return body
        pos += 2
    return b"".join(out)


_INFLATE_WBITS = {
    "gzip": (zlib.MAX_WBITS | 16,),
    "x-gzip": (zlib.MAX_WBITS | 16,),
    "deflate": (zlib.MAX_WBITS, -zlib.MAX_WBITS),  # zlib-wrapped as the RFC says, or raw as some servers send it
}


def _decode_content(body: bytes, encoding: str) -> bytes:
    """The body without its Content-Encoding where it decodes, as stored where it does not (a crawler that stored it
    decoded under the same header; warcio keeps those too); a body cut short keeps what it holds."""
    if encoding == "br":
        try:
            return brotli.Decompressor().process(body)
        except brotli.error:
            return body
    for wbits in _INFLATE_WBITS.get(encoding, ()):
        try:
            return zlib.decompressobj(wbits).decompress(body)
        except zlib.error:
            pass
    return body


def parse_http_response(block: bytes) -> tuple[int, dict[str, str], bytes]:
    head, sep, body = block.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("no end of HTTP headers")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _dechunk(body)
    if "content-encoding" in headers:
        body = _decode_content(body, headers["content-encoding"].lower())
    return status, headers, body


def _digest_matches(declared: str, candidates: list[bytes]) -> bool:
    """`declared` is "algorithm:value", the value in base32 (as Common Crawl writes sha1) or hex; an algorithm
    hashlib does not know is not checked."""
    algorithm, _, value = declared.partition(":")
    algorithm = algorithm.strip().lower().replace("-", "")
    if algorithm not in hashlib.algorithms_available or not value:
        return True
    value = value.strip()
    for data in candidates:
        digest = hashlib.new(algorithm, data).digest()
        if value.upper() == base64.b32encode(digest).decode("ascii") or value.lower() == digest.hex():
            return True
    return False


def digests_match(record: WarcRecord) -> bool:
    """WARC-Block-Digest over the record's block, and WARC-Payload-Digest over its HTTP body (as stored, or with
    its chunked transfer encoding removed, as some crawlers hash it), where the record declares them: a record
    changed after it was written (tampered, or spliced from another crawl) does not match."""
    headers, block = record.headers, record.block
    if "warc-block-digest" in headers and not _digest_matches(headers["warc-block-digest"], [block]):
        return False
    if "warc-payload-digest" in headers and headers.get("warc-type") == "response":
        head, sep, body = block.partition(b"\r\n\r\n")
        candidates = [body]
        if b"chunked" in head.lower():
            candidates.append(_dechunk(body))
        return _digest_matches(headers["warc-payload-digest"], candidates)
    return True


def payload_digest(payload: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(payload).digest()).decode("ascii")


def _content_type(value: str) -> tuple[str, str | None]:
    mime, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset" and val.strip():
            charset = val.strip().strip("\"'")
    return mime.strip().lower(), charset


class WarcReader:
    """Reads WARC response records with HTML, and WET conversion records, into document rows."""

    def __init__(self, snapshot: str, source: str = "web", max_payload_bytes: int = 5_000_000):
        self.snapshot = snapshot
        self.source = source
        self.max_payload_bytes = max_payload_bytes

    def _document(self, record: WarcRecord, warc_file: str, offset: int) -> tuple[dict | None, str | None]:
        headers = record.headers
        kind = headers.get("warc-type", "unknown").lower()
        url = headers.get("warc-target-uri", "").strip("<>") or None
        record_id = headers.get("warc-record-id")
        row = {
            "url": url,
            "source": self.source,
            "snapshot": self.snapshot,
            "warc_file": warc_file,
            "warc_record_id": record_id,
            "warc_offset": offset,
            "warc_date": headers.get("warc-date"),
            "text": None,
            "html": None,
            "content_type": None,
            "charset": None,
        }
        if kind not in ("conversion", "response"):
            return None, f"record_{kind}"
        if not digests_match(record):
            return None, "digest_mismatch"
        if kind == "conversion":
            payload = record.block
            row["text"] = payload.decode("utf-8", "replace")
        else:
            try:
                status, http_headers, payload = parse_http_response(record.block)
            except (ValueError, IndexError):
                return None, "bad_http"
            if status != 200:
                return None, "http_not_ok"
            mime, charset = _content_type(http_headers.get("content-type", ""))
            if mime not in HTML_TYPES:
                return None, "not_html"
            row.update(html=payload, content_type=mime, charset=charset)
        if len(payload) > self.max_payload_bytes:
            return None, "payload_too_large"
        digest = headers.get("warc-payload-digest") or payload_digest(payload)
        row["warc_digest"] = digest
        row["id"] = document_id(record_id, url, digest)
        return row, None

    def read(self, path: str) -> ReadResult:
        """Read one file; every record ends up as a row or as a counted drop reason."""
        result = ReadResult(table=READ_SCHEMA.empty_table())
        result.table = pa.concat_tables(self.read_batches(path, None, result))
        return result

    def read_batches(self, path: str, batch_documents: int | None, result: ReadResult) -> Iterator[pa.Table]:
        """The file as tables of `batch_documents` rows (the last one shorter; one table when None), so a worker
        holds one batch of a Common Crawl file's pages, not all of them. `result` counts the drops as they come
        and gets the file's sha256 at the end."""
        rows, batches, result.records = [], 0, 0
        warc_file = path  # as given (path or URL): two inputs of one name in different folders stay apart
        with fsspec.open(path, "rb") as raw:
            stream = _HashingReader(raw)
            # by name too: a hit on the first member's magic must cost that member, not turn the file into garbage
            compressed = stream.peek(len(GZIP_MAGIC)) == GZIP_MAGIC or path.endswith(".gz")
            members = iter_gzip_members(stream) if compressed else iter([(stream.read_all(), None, 0)])
            for member, problem, member_offset in members:
                if problem:
                    result.dropped[problem] += 1
                for record, bad in iter_records(member):
                    if bad:
                        row, reason = None, bad
                    else:
                        result.records += 1
                        row, reason = self._document(record, warc_file, member_offset if compressed else record.offset)
                    if reason:
                        result.dropped[reason] += 1
                    else:
                        rows.append(row)
                    if batch_documents and len(rows) == batch_documents:
                        yield pa.Table.from_pylist(rows, schema=READ_SCHEMA)
                        rows, batches = [], batches + 1
            result.sha256 = stream.sha256.hexdigest()
        if rows or not batches:
            yield pa.Table.from_pylist(rows, schema=READ_SCHEMA)


class _HashingReader:
    """Hashes what it reads (the manifest records each input's sha256) and lets the reader peek at the magic."""

    def __init__(self, raw):
        self.raw = raw
        self.sha256 = hashlib.sha256()
        self.pending = b""

    def peek(self, n: int) -> bytes:
        self.pending += self.read(n)
        return self.pending

    def read(self, n: int) -> bytes:
        if self.pending:
            data, self.pending = self.pending, b""
            return data + self.read(max(0, n - len(data))) if n > len(data) else data
        data = self.raw.read(n)
        self.sha256.update(data)
        return data

    def read_all(self) -> bytes:
        chunks = [self.read(1 << 20)]
        while chunks[-1]:
            chunks.append(self.read(1 << 20))
        return b"".join(chunks)
