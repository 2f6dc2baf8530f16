import argparse
import gzip
import io
import os
import zlib

import brotli
import pyarrow as pa
import pytest

from curation.sources.warc import WarcReader, iter_gzip_members, iter_records, payload_digest
from tests.conftest import SHARED_CORPUS, SHARED_DATA, shared


def gzip_members(raw: bytes) -> list[tuple[int, int]]:
    """(start, end) offsets of each gzip member."""
    spans, offset = [], 0
    while offset < len(raw):
        inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
        inflater.decompress(raw[offset:])
        end = len(raw) - len(inflater.unused_data)
        spans.append((offset, end))
        offset = end
    return spans


def test_cc_main_2020_34_slice_yields_its_16_responses():
    result = WarcReader("CC-MAIN-2020-34").read(str(shared("warc/cc-main-2020-34-sample.warc.gz")))
    assert result.table.num_rows == 16
    assert dict(result.dropped) == {"record_warcinfo": 1, "record_request": 17, "record_metadata": 16}
    assert result.table["url"].null_count == 0 and all(result.table["html"].to_pylist())
    assert len(set(result.table["id"].to_pylist())) == 16


@pytest.mark.parametrize(
    "name, html_docs",
    [("wget-2024-sample-0000.warc.gz", 22), ("wget-2024-sample-0001.warc.gz", 15), ("cc-main-2024-22-one-page.warc.gz", 1)],
)
def test_real_warc_slices_every_record_is_a_row_or_a_reason(name, html_docs):
    path = shared(f"warc/{name}")
    records = sum(1 for start, end in gzip_members(path.read_bytes()))
    result = WarcReader("x").read(str(path))
    assert result.table.num_rows == html_docs
    assert result.table.num_rows + sum(result.dropped.values()) == records


def test_wet_file_gives_text_without_html():
    result = WarcReader("CC-MAIN-2024-22").read(str(shared("warc/cc-main-2024-22-one-page.warc.wet.gz")))
    assert result.table.num_rows == 1
    row = result.table.to_pylist()[0]
    assert row["html"] is None and row["url"] == "https://an.wikipedia.org/wiki/Escopete"
    assert "Escopete" in row["text"]


HTML_MIMES = ("text/html", "application/xhtml+xml")


def warcio_documents(path) -> dict[str, bytes | str]:
    """What warcio (datatrove's WARC reader) gives of a file, by record id: the decoded body of each HTML 200 response
    and the text of each WET conversion record."""
    from warcio.archiveiterator import ArchiveIterator

    documents = {}
    with open(path, "rb") as handle:
        for record in ArchiveIterator(handle):
            http = record.http_headers
            if record.rec_type == "conversion":
                documents[record.rec_headers.get_header("WARC-Record-ID")] = record.content_stream().read().decode("utf-8", "replace")
            elif (
                record.rec_type == "response"
                and http
                and http.get_statuscode() == "200"
                and (http.get_header("content-type") or "").split(";")[0].strip().lower() in HTML_MIMES
            ):
                documents[record.rec_headers.get_header("WARC-Record-ID")] = record.content_stream().read()
    return documents


def test_every_shared_warc_file_keeps_what_warcio_reads():
    """Each WARC/WET/WAT file of the shared folders (pywb, node-warc, Internet Archive, UKWA, wget, Common Crawl)
    gives at least the documents warcio finds in it, each with warcio's body: chunked bodies, bodies stored de-chunked
    under `Transfer-Encoding: chunked`, and gzip bodies included."""
    pytest.importorskip("warcio", reason="the comparison with warcio needs `pip install warcio` (the test extra)")
    folders = [folder for folder in (SHARED_CORPUS / "warc", SHARED_DATA / "warc") if folder.is_dir()]
    if not folders:
        pytest.skip(f"{SHARED_CORPUS / 'warc'} and {SHARED_DATA / 'warc'} are absent (see their READMEs)")
    paths = sorted(path for folder in folders for path in folder.rglob("*.warc*") if path.is_file())
    problems = []
    for path in paths:
        expected = warcio_documents(path)
        rows = WarcReader("x").read(str(path)).table.select(["warc_record_id", "html", "text"]).to_pylist()
        ours = {row["warc_record_id"]: row["html"] if row["html"] is not None else row["text"] for row in rows}
        if len(ours) < len(expected):
            problems.append(f"{path}: ours {len(ours)}, warcio {len(expected)}")
        problems += [f"{path}: {record_id} differs from warcio's body" for record_id in expected.keys() & ours.keys()
                     if ours[record_id] != expected[record_id]]  # fmt: skip
    assert paths and not problems, "\n".join(problems)


PAGE = b"<!doctype html>\n<html><body><p>A page long enough to be sent in several chunks.</p></body></html>\n"


def chunked(data: bytes, size: int = 16) -> bytes:
    """data in HTTP/1.1 chunks of `size` bytes (a chunk extension on the first), then the last chunk."""
    pieces = [data[at : at + size] for at in range(0, len(data), size)]
    ext = [b";ext=1"] + [b""] * (len(pieces) - 1)
    return b"".join(b"%x%s\r\n%s\r\n" % (len(piece), e, piece) for piece, e in zip(pieces, ext)) + b"0\r\n\r\n"


def read_response(tmp_path, http_headers: bytes, body: bytes, digest: str | None = None):
    """Read a WARC holding one HTTP 200 HTML response with these extra headers, this body as stored, and a
    WARC-Payload-Digest where given."""
    block = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n" + http_headers + b"\r\n" + body
    digest_header = f"WARC-Payload-Digest: {digest}\r\n".encode() if digest else b""
    record = (b"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:one>\r\nWARC-Target-URI: http://example.com/\r\n"
              + digest_header + b"Content-Type: application/http; msgtype=response\r\nContent-Length: %d\r\n\r\n" % len(block)
              + block + b"\r\n\r\n")  # fmt: skip
    path = tmp_path / "one.warc"
    path.write_bytes(record)
    return WarcReader("x").read(str(path))


@pytest.mark.parametrize(
    "http_headers, body, html",
    [
        pytest.param(b"Transfer-Encoding: chunked\r\n", chunked(PAGE), PAGE, id="chunked"),
        pytest.param(b"Transfer-Encoding: chunked\r\n", chunked(PAGE)[:40], PAGE[:24], id="chunked-cut-short"),
        # pywb's iana.org capture: the body stored de-chunked, the header kept, its length unknown
        pytest.param(b"Transfer-Encoding: chunked\r\nContent-Length: -1\r\n", b"\n" + PAGE, b"\n" + PAGE, id="stored-de-chunked"),
        pytest.param(b"Content-Encoding: gzip\r\n", gzip.compress(PAGE), PAGE, id="gzip"),
        pytest.param(b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", chunked(gzip.compress(PAGE)), PAGE, id="gzip-in-chunks"),
        # the Internet Archive's example.pdf.warc.gz: gzip stored de-chunked under both headers
        pytest.param(b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", gzip.compress(PAGE), PAGE, id="gzip-stored-de-chunked"),
        pytest.param(b"Content-Encoding: gzip\r\n", PAGE, PAGE, id="gzip-stored-decoded"),
        pytest.param(b"Content-Encoding: deflate\r\n", zlib.compress(PAGE), PAGE, id="deflate"),
        pytest.param(b"Content-Encoding: deflate\r\n", zlib.compress(PAGE)[2:-4], PAGE, id="raw-deflate"),
        pytest.param(b"Content-Encoding: br\r\n", brotli.compress(PAGE), PAGE, id="brotli"),
        # a first line that parses as a chunk size, then no CRLF after the chunk: not chunks, kept as stored
        pytest.param(b"Transfer-Encoding: chunked\r\n", b"a\r\n0123456789 and on", b"a\r\n0123456789 and on", id="claims-chunked-is-not"),
        pytest.param(b"Transfer-Encoding: chunked\r\n", PAGE, PAGE, id="claims-chunked-html"),
    ],
)  # fmt: skip
def test_transfer_and_content_encodings_decode_as_warcio_does(tmp_path, http_headers, body, html):
    result = read_response(tmp_path, http_headers, body)
    assert not result.dropped
    assert result.table["html"].to_pylist() == [html]


@pytest.mark.parametrize("hashed", ["stored", "de-chunked"])
def test_payload_digest_of_a_chunked_body_matches_as_stored_or_de_chunked(tmp_path, hashed):
    """The WARC spec hashes the entity body (transfer coding removed), most crawlers hash the bytes as stored: either
    matches, and a digest of other bytes is a mismatch."""
    body = chunked(PAGE)
    result = read_response(tmp_path, b"Transfer-Encoding: chunked\r\n", body, payload_digest(body if hashed == "stored" else PAGE))
    assert result.table["html"].to_pylist() == [PAGE]
    tampered = read_response(tmp_path, b"Transfer-Encoding: chunked\r\n", body, payload_digest(PAGE + b" "))
    assert dict(tampered.dropped) == {"digest_mismatch": 1}


def html_responses(raw: bytes, kept_record_ids: set[str]) -> list[tuple[int, tuple[int, int], str]]:
    """(member index, span, record id) of the members holding a response that the reader keeps."""
    found = []
    for index, (start, end) in enumerate(gzip_members(raw)):
        for record, _ in iter_records(gzip.decompress(raw[start:end])):
            record_id = record.headers.get("warc-record-id")
            if record_id in kept_record_ids:
                found.append((index, (start, end), record_id))
    return found


def test_corrupt_gzip_member_and_garbage_keep_every_good_record(sample_snapshot, tmp_path):
    path = sample_snapshot / "sample-0000.warc.gz"
    raw = path.read_bytes()
    clean = WarcReader("sample").read(str(path))
    responses = html_responses(raw, set(clean.table["warc_record_id"].to_pylist()))
    (_, damaged_span, lost_id), (_, garbage_before, _) = responses[3], responses[7]
    damaged = bytearray(raw)
    middle = (damaged_span[0] + damaged_span[1]) // 2
    noise = b"\x00garbage\xff" * 4
    damaged[middle : middle + len(noise)] = noise
    at = garbage_before[0]
    corrupt = tmp_path / "damaged.warc.gz"
    corrupt.write_bytes(bytes(damaged[:at]) + b"NOT A GZIP MEMBER" * 20 + bytes(damaged[at:]))
    result = WarcReader("sample").read(str(corrupt))
    assert result.dropped["corrupt_gzip"] == 1
    assert result.dropped["garbage_bytes"] == 1
    expected = [i for i, r in zip(clean.table["id"].to_pylist(), clean.table["warc_record_id"].to_pylist()) if r != lost_id]
    assert result.table["id"].to_pylist() == expected


def test_truncated_record_in_the_middle_and_at_the_end(sample_snapshot, tmp_path):
    path = sample_snapshot / "sample-0001.warc.gz"
    raw = path.read_bytes()
    clean = WarcReader("sample").read(str(path))
    records = [gzip.decompress(raw[s:e]) for s, e in gzip_members(raw)]
    responses = html_responses(raw, set(clean.table["warc_record_id"].to_pylist()))
    middle, _, cut_id = responses[5]
    last, _, last_id = responses[-1]
    assert last == len(records) - 1
    # an uncompressed WARC with one response cut in half, and the file cut inside its last record
    body = b"".join(records[:middle]) + records[middle][: len(records[middle]) // 2] + b"".join(records[middle + 1 :])
    truncated = tmp_path / "truncated.warc"
    truncated.write_bytes(body[:-100])
    result = WarcReader("sample").read(str(truncated))
    assert result.dropped["truncated_record"] == 2
    expected = [
        i for i, r in zip(clean.table["id"].to_pylist(), clean.table["warc_record_id"].to_pylist()) if r not in (cut_id, last_id)
    ]
    assert result.table["id"].to_pylist() == expected


def test_gzip_file_cut_short_keeps_what_came_before(sample_snapshot):
    raw = (sample_snapshot / "sample-0002.warc.gz").read_bytes()
    spans = gzip_members(raw)
    members = list(iter_gzip_members(io.BytesIO(raw[: spans[-1][0] + 30])))
    assert all(problem is None for _, problem, _ in members[:-1])
    records = [r for member, _, _ in members for r, bad in iter_records(member) if r]
    assert len(records) == len(spans) - 1


def test_reader_schema_is_the_document_schema(sample_snapshot):
    from curation.schema import READ_SCHEMA

    table = WarcReader("sample").read(str(sample_snapshot / "sample-0003.warc.gz")).table
    assert table.schema == READ_SCHEMA
    assert pa.compute.all(pa.compute.equal(table["snapshot"], "sample")).as_py()


def test_a_hit_on_the_first_magic_costs_that_member_not_the_file(sample_snapshot, tmp_path):
    path = sample_snapshot / "sample-0000.warc.gz"
    raw = bytearray(path.read_bytes())
    clean = WarcReader("sample").read(str(path))
    raw[1] ^= 0x01  # 1f 8b -> 1f 8a: the first member (warcinfo) has no gzip magic left
    damaged = tmp_path / "magic.warc.gz"
    damaged.write_bytes(bytes(raw))
    result = WarcReader("sample").read(str(damaged))
    assert result.table["id"].to_pylist() == clean.table["id"].to_pylist()
    assert result.dropped["garbage_bytes"] == 1 and "record_warcinfo" not in result.dropped


def test_neighbouring_corrupt_members_count_each_and_a_cut_trailer_counts(sample_snapshot, tmp_path):
    path = sample_snapshot / "sample-0001.warc.gz"
    raw = path.read_bytes()
    clean = WarcReader("sample").read(str(path))
    spans = gzip_members(raw)
    damaged = bytearray(raw)
    for start, end in spans[4:6]:  # two members in a row: their deflate data overwritten
        middle = (start + end) // 2
        damaged[middle : middle + 16] = b"\xff" * 16
    damaged = bytes(damaged[: spans[-1][1] - 3])  # and the last member's trailer cut short
    (tmp_path / "two.warc.gz").write_bytes(damaged)
    result = WarcReader("sample").read(str(tmp_path / "two.warc.gz"))
    assert result.dropped["corrupt_gzip"] == 2
    assert result.dropped["truncated_gzip"] == 1
    assert "garbage_bytes" not in result.dropped
    assert result.table.num_rows + sum(result.dropped.values()) == len(spans) - 2 + 3  # - lost members + 3 counts
    assert clean.table.num_rows - result.table.num_rows <= 2


def test_tampered_records_fail_their_digests_and_offsets_point_at_each_record(sample_snapshot, tmp_path):
    """A record whose HTML changed after it was written (a split-view or tampering route to poison a crawl) is
    dropped as digest_mismatch; every kept document's warc_offset is the start of the gzip member holding it."""
    path = sample_snapshot / "sample-0002.warc.gz"
    raw = path.read_bytes()
    clean = WarcReader("sample").read(str(path))
    responses = html_responses(raw, set(clean.table["warc_record_id"].to_pylist()))
    tampered_ids, pieces, at = set(), [], 0
    for _, (start, end), record_id in responses[2:14:4]:  # three responses: one byte of their HTML changed
        member = bytearray(gzip.decompress(raw[start:end]))
        html_at = member.index(b"<body")
        member[html_at + 1] = ord("B")  # <body -> <Body: same length, same Content-Length, different bytes
        pieces += [raw[at:start], gzip.compress(bytes(member))]
        tampered_ids.add(record_id)
        at = end
    (tmp_path / "tampered.warc.gz").write_bytes(b"".join(pieces) + raw[at:])
    result = WarcReader("sample").read(str(tmp_path / "tampered.warc.gz"))
    assert result.dropped["digest_mismatch"] == 3
    assert set(result.table["warc_record_id"].to_pylist()) == set(clean.table["warc_record_id"].to_pylist()) - tampered_ids
    for row in clean.table.select(["warc_record_id", "warc_offset"]).to_pylist():
        record, _ = next(iter_records(zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(raw[row["warc_offset"] :])))
        assert record.headers["warc-record-id"] == row["warc_record_id"]


def test_warc_file_names_one_input_among_inputs_of_the_same_name(sample_snapshot, tmp_path):
    """Two crawls' `part-0000.warc.gz` in different folders: a document's warc_file + warc_offset name one record."""
    paths = []
    for crawl, sample_file in (("crawl-a", "sample-0000.warc.gz"), ("crawl-b", "sample-0001.warc.gz")):
        (tmp_path / crawl).mkdir()
        paths.append(tmp_path / crawl / "part-0000.warc.gz")
        paths[-1].write_bytes((sample_snapshot / sample_file).read_bytes())
    tables = [WarcReader("sample").read(str(path)).table for path in paths]
    assert [set(table["warc_file"].to_pylist()) for table in tables] == [{str(paths[0])}, {str(paths[1])}]
    for table in tables:
        for row in table.select(["warc_file", "warc_record_id", "warc_offset"]).to_pylist()[:20]:
            with open(row["warc_file"], "rb") as handle:
                handle.seek(row["warc_offset"])
                record, _ = next(iter_records(zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(handle.read())))
            assert record.headers["warc-record-id"] == row["warc_record_id"]


def test_input_globs_expand_brackets_and_question_marks(tmp_path):
    """`part-000[0-3]` and `part-000?` expand as `*` does (fsspec expands only `*`); a file named with brackets is
    itself; a glob that matches nothing is one line."""
    from rich.console import Console

    from curation.cli import resolve_inputs

    for name in [f"part-000{i}.warc.gz" for i in range(5)] + ["odd[1].warc.gz"]:
        (tmp_path / name).write_bytes(b"")

    def inputs(pattern: str) -> list[str]:
        args = argparse.Namespace(input=[str(tmp_path / pattern)], max_files=None, snapshot=None)
        return [os.path.basename(path) for path in resolve_inputs(args, Console(quiet=True))[0]]

    assert inputs("part-000[0-3].warc.gz") == [f"part-000{i}.warc.gz" for i in range(4)]
    assert inputs("part-000?.warc.gz") == inputs("part-*.warc.gz") == [f"part-000{i}.warc.gz" for i in range(5)]
    assert inputs("odd[1].warc.gz") == ["odd[1].warc.gz"]
    with pytest.raises(SystemExit, match=r"part-000\[7-9\].warc.gz' matches no file"):
        inputs("part-000[7-9].warc.gz")
