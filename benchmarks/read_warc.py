"""Reader throughput: our resilient WARC reader vs fastwarc and warcio on the same files, in one run.

    python benchmarks/read_warc.py [--pages 4000] [--files 2] [--repeat 3]

Baselines are named in the output; the ratio is ours / fastwarc (higher is better for ours).
Every reader does the same work: iterate all records, keep HTML responses with status 200, read the payload.
"""

import argparse
import tempfile
import time
from pathlib import Path

from curation.sources import sample
from curation.sources.warc import WarcReader


def fastwarc_read(path: Path) -> int:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    kept = 0
    with open(path, "rb") as stream:
        for record in ArchiveIterator(stream, record_types=WarcRecordType.response, parse_http=True):
            if record.http_headers.status_code == 200 and (record.http_content_type or "").startswith("text/html"):
                kept += bool(record.reader.read())
    return kept


def warcio_read(path: Path) -> int:
    from warcio.archiveiterator import ArchiveIterator

    kept = 0
    with open(path, "rb") as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type != "response" or record.http_headers.get_statuscode() != "200":
                continue
            if (record.http_headers.get_header("Content-Type") or "").startswith("text/html"):
                kept += bool(record.content_stream().read())
    return kept


def ours_read(path: Path) -> int:
    return WarcReader("bench").read(str(path)).table.num_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=4000)
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        paths = sample.generate(folder, pages=args.pages, files=args.files, seed=7)
        megabytes = sum(p.stat().st_size for p in paths) / 1e6
        results = {}
        for name, read in [("fastwarc (baseline)", fastwarc_read), ("warcio", warcio_read), ("ours", ours_read)]:
            best = float("inf")
            for _ in range(args.repeat):
                started = time.perf_counter()
                docs = sum(read(p) for p in paths)
                best = min(best, time.perf_counter() - started)
            results[name] = (docs, best)
    base = results["fastwarc (baseline)"][1]
    print(f"{args.pages} pages, {args.files} files, {megabytes:.1f} MB gzip; best of {args.repeat}, one core")
    print(f"{'reader':<22}{'HTML docs':>10}{'seconds':>10}{'MB/s':>8}{'docs/s':>9}{'speed vs fastwarc':>19}")
    for name, (docs, seconds) in results.items():
        print(f"{name:<22}{docs:>10}{seconds:>10.3f}{megabytes / seconds:>8.1f}{docs / seconds:>9.0f}{base / seconds:>18.2f}x")


if __name__ == "__main__":
    main()
