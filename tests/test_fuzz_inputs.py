"""Seeded fuzzing of WARC/WET input through read + extract: 2,000 damaged files, each a clean twin with one kind of
damage to one record's gzip member. Nothing crashes or hangs, nothing is invented, every record of an untouched
member is kept exactly, and whatever was lost is counted under a reason."""

import gzip
import io
import random
import re
import threading
import time
import zlib
from collections import Counter

import pyarrow as pa
import pytest

from curation.sources.warc import WarcReader, iter_gzip_members, iter_records
from filters.extract import HtmlExtractor

CASES = 2000
MEMBERS_PER_FILE = 9  # warcinfo, then request/response pairs


def _members(raw: bytes) -> list[bytes]:
    """The file's gzip members, compressed, in order."""
    spans, offsets = [], [offset for _, _, offset in iter_gzip_members(io.BytesIO(raw))] + [len(raw)]
    for start, end in zip(offsets, offsets[1:]):
        spans.append(raw[start:end])
    return spans


def _record(member: bytes) -> bytes:
    return gzip.decompress(member)


def _set_header(record: bytes, name: bytes, value: bytes | None) -> bytes:
    head, sep, body = record.partition(b"\r\n\r\n")
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(name.lower() + b":")]
    if value is not None:
        lines.append(name + b": " + value)
    return b"\r\n".join(lines) + sep + body


def _replace_http_body(record: bytes, body: bytes, content_type: bytes | None = None) -> bytes:
    """The response's HTTP body (and content type) replaced, with Content-Length fixed and digests dropped."""
    warc_head, _, block = record.partition(b"\r\n\r\n")
    http_head, _, _ = block.partition(b"\r\n\r\n")
    if content_type is not None:
        http_head = re.sub(rb"(?im)^content-type:[^\r\n]*", b"Content-Type: " + content_type, http_head)
    block = http_head + b"\r\n\r\n" + body
    record = warc_head + b"\r\n\r\n" + block.rstrip(b"\r\n") + b"\r\n\r\n"
    for name in (b"WARC-Block-Digest", b"WARC-Payload-Digest"):
        record = _set_header(record, name, None)
    return _set_header(record, b"Content-Length", str(len(block)).encode())


def _mutations(rng: random.Random):
    """(name, function of (members, index) -> members): one kind of damage to member `index`."""

    def flip_bits(members, i):
        member = bytearray(members[i])
        for _ in range(rng.randint(1, 8)):
            member[rng.randrange(len(member))] ^= 1 << rng.randrange(8)
        return members[:i] + [bytes(member)] + members[i + 1 :]

    def truncate(members, i):
        return members[:i] + [members[i][: rng.randrange(1, len(members[i]))]]  # the file ends inside it

    def duplicate(members, i):
        return members[: i + 1] + [members[i]] + members[i + 1 :]

    def wrong_length(members, i):
        record = _record(members[i])
        length = int(re.search(rb"(?i)content-length:\s*(\d+)", record).group(1))
        record = _set_header(record, b"Content-Length", str(max(0, length + rng.choice([-500, -7, 3, 900]))).encode())
        return members[:i] + [gzip.compress(record)] + members[i + 1 :]

    def missing_header(members, i):
        name = rng.choice([b"WARC-Type", b"WARC-Target-URI", b"Content-Length", b"WARC-Record-ID", b"WARC-Date"])
        return members[:i] + [gzip.compress(_set_header(_record(members[i]), name, None))] + members[i + 1 :]

    def binary_payload(members, i):
        record = _record(members[i])
        if b"WARC-Type: response" not in record:
            return flip_bits(members, i)
        body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 3000)))
        return members[:i] + [gzip.compress(_replace_http_body(record, body))] + members[i + 1 :]

    def wrong_charset(members, i):
        record = _record(members[i])
        if b"WARC-Type: response" not in record:
            return duplicate(members, i)
        charset = rng.choice([b"text/html; charset=klingon", b"text/html; charset=utf-16", b"text/html", b"text/html; charset="])
        body = record.partition(b"\r\n\r\n")[2].partition(b"\r\n\r\n")[2].rstrip(b"\r\n")
        if rng.random() < 0.5:
            body = body.decode("utf-8", "replace").encode("latin-1", "replace")
        return members[:i] + [gzip.compress(_replace_http_body(record, body, charset))] + members[i + 1 :]

    def deep_nesting(members, i):
        record = _record(members[i])
        if b"WARC-Type: response" not in record:
            return truncate(members, i)
        depth = rng.randint(1000, 6000)
        body = b"<html><body>" + b"<div>" * depth + b"<p>deep text here</p>" + b"</div>" * depth + b"</body></html>"
        return members[:i] + [gzip.compress(_replace_http_body(record, body))] + members[i + 1 :]

    return [flip_bits, truncate, duplicate, wrong_length, missing_header, binary_payload, wrong_charset, deep_nesting]


def _rows(table: pa.Table) -> dict[str, tuple]:
    return {row["warc_record_id"]: (row["id"], row["html"]) for row in table.select(["warc_record_id", "id", "html"]).to_pylist()}


def test_two_thousand_damaged_files_crash_nothing_and_lose_only_what_was_damaged(sample_snapshot, tmp_path):
    clean_members = _members((sample_snapshot / "sample-0003.warc.gz").read_bytes())
    rng = random.Random(2026)
    mutations = _mutations(rng)
    reader, extract = WarcReader("fuzz"), HtmlExtractor(HtmlExtractor.Params(timeout_s=2))
    kinds, reasons, slowest = Counter(), Counter(), 0.0
    for case in range(CASES):
        start = rng.randrange(0, len(clean_members) - MEMBERS_PER_FILE)
        members = clean_members[start : start + MEMBERS_PER_FILE]
        twin = tmp_path / "twin.warc.gz"
        twin.write_bytes(b"".join(members))
        clean = _rows(reader.read(str(twin)).table)
        index = rng.randrange(len(members))
        mutate = mutations[case % len(mutations)]
        damaged_members = mutate(list(members), index)
        path = tmp_path / "damaged.warc.gz"
        path.write_bytes(b"".join(damaged_members))
        started = time.perf_counter()
        result = reader.read(str(path))
        extracted = extract.process(result.table)
        slowest = max(slowest, time.perf_counter() - started)
        kinds[mutate.__name__] += 1
        reasons.update(result.dropped)
        reasons.update(extracted.dropped)

        kept = _rows(result.table)
        still_there = set(damaged_members)  # a truncation also removes every member after it
        untouched = {_record_id(m) for j, m in enumerate(members) if j != index and m in still_there} - {None}
        assert set(kept) <= set(clean) | {None} | _ids_in(damaged_members[index : index + 2]), mutate.__name__
        for record_id in untouched & set(clean):
            assert kept.get(record_id) == clean[record_id], (case, mutate.__name__, record_id)
        # every member of the damaged file (one record each) is a row or a counted reason: nothing vanishes unsaid
        assert result.table.num_rows + sum(result.dropped.values()) >= len(damaged_members), (case, mutate.__name__)
        assert extracted.kept.num_rows + sum(extracted.dropped.values()) == result.table.num_rows
    print(f"{CASES} damaged files ({dict(kinds)}); slowest read + extract {slowest:.2f} s; reasons {dict(reasons)}")
    assert len(kinds) == len(mutations)
    assert {"corrupt_gzip", "truncated_gzip", "truncated_record", "bad_warc_header", "garbage_bytes"} <= set(reasons)


def _record_id(member: bytes) -> str | None:
    match = re.search(rb"(?i)WARC-Record-ID:\s*(\S+)", _record(member))
    return match.group(1).decode() if match else None


def _ids_in(members: list[bytes]) -> set[str]:
    found = set()
    for member in members:
        try:
            for record, _ in iter_records(gzip.decompress(member)):
                if record is not None and "warc-record-id" in record.headers:
                    found.add(record.headers["warc-record-id"])
        except (OSError, EOFError, ValueError, zlib.error):
            continue
    return found


def test_a_50_mb_page_is_counted_not_held():
    page = b"<html><body>" + b"<p>" + b"x" * (50 * 2**20) + b"</p></body></html>"
    record = (b"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:big>\r\nWARC-Target-URI: http://big.example/\r\n"
              b"Content-Type: application/http; msgtype=response\r\nContent-Length: %d\r\n\r\n" % (len(page) + 44)
              + b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n" + page + b"\r\n\r\n")  # fmt: skip
    table = pa.table({"id": ["big"], "html": pa.array([page], pa.binary()), "charset": [None], "text": pa.array([None], pa.string())})
    assert HtmlExtractor().process(table).dropped == {"html_too_large": 1}
    dropped = Counter()
    for member, problem, _ in iter_gzip_members(io.BytesIO(gzip.compress(record, compresslevel=1))):
        for parsed, bad in iter_records(member):
            row, reason = WarcReader("big")._document(parsed, "big.warc.gz", 0)
            dropped[reason] += 1
    assert dropped == {"payload_too_large": 1}


@pytest.mark.parametrize("backend", ["trafilatura", "resiliparse"])
def test_the_time_limit_holds_off_the_main_thread(backend):
    """Without SIGALRM (only the main thread gets signals) a page runs in a child process that is killed at the
    limit: a thread pool calling the stage cannot hang on one page."""
    depth = 60000
    page = (b"<html><body>" + b"<div><p>nested paragraph text</p>" * depth + b"</div>" * depth + b"</body></html>")
    table = pa.table({"id": ["slow"], "html": pa.array([page], pa.binary()), "charset": ["utf-8"], "text": pa.array([None], pa.string())})
    stage = HtmlExtractor(HtmlExtractor.Params(backend=backend, timeout_s=0.02, max_html_bytes=10**8))
    found = {}
    worker = threading.Thread(target=lambda: found.update(stage.process(table).dropped))
    started = time.perf_counter()
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive() and found == {"extract_timeout": 1}
    assert time.perf_counter() - started < 30
    article = b"<html><body><article><p>" + b"A river carries sediment from the mountains to the sea. " * 20 + b"</p></article></body></html>"
    normal = pa.table({"id": ["ok"], "html": pa.array([article], pa.binary()), "charset": ["utf-8"], "text": pa.array([None], pa.string())})
    generous = HtmlExtractor(HtmlExtractor.Params(backend=backend, timeout_s=30))
    kept = []
    worker = threading.Thread(target=lambda: kept.extend(generous.process(normal).kept["text"].to_pylist()))
    worker.start()
    worker.join(timeout=60)
    assert kept and "sediment from the mountains" in kept[0]  # the child process extracts what the main thread would
