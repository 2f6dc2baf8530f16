"""FineWeb's URL filter: our `url_filter` stage vs datatrove 0.10's URLFilter, same URLs, same process, one core.

    python benchmarks/url_filter_vs_datatrove.py [--urls 100000]

URLs: the parity test's mix (tests/test_url_filter.py `sample_urls`, one seed per ~6k URLs): listed domains and
URLs from FineWeb's tarball, banned and soft banned words and subwords, IP and odd hosts, clean URLs; about half
are dropped. Both sides use the same offline tldextract. Setup: ours builds the hashed blocklist once per machine
(cold) and reads it by bucket (warm: any later worker); datatrove's `download_data` unpacks the tarball once (cold)
and loads Python sets in every worker (warm). Prints setup seconds, resident memory a worker adds by loading the
lists (ours: the 36 MB hash file stays in the page cache, read a bucket at a time), URLs/s through the stage
(`process` on one Arrow table) and datatrove's `filter` per Document, the ratio and how many decisions differ
(expected: 0).
"""

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from filters.url_filter import UrlFilter, datatrove_reference  # noqa: E402
from tests.test_url_filter import sample_urls  # noqa: E402


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20


def timed(make):
    before, started = rss_mb(), time.perf_counter()
    made = make()
    return made, time.perf_counter() - started, rss_mb() - before


def ours() -> UrlFilter:
    stage = UrlFilter()
    stage.setup()
    return stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, default=100_000)
    args = parser.parse_args()
    urls, seed = [], 0
    while len(urls) < args.urls:
        urls += sample_urls(seed)
        seed += 1
    urls = urls[: args.urls]
    table = pa.table({"id": [str(i) for i in range(len(urls))], "url": urls})
    with tempfile.TemporaryDirectory(prefix="url-bench-") as work:
        os.environ["CURATE_CACHE"] = f"{work}/cache"
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        _, cold, _ = timed(ours)
        build_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
        stage, warm, ours_mb = timed(ours)
        started = time.perf_counter()
        result = stage.process(table)
        ours_seconds = time.perf_counter() - started
        judge, their_cold, their_mb = timed(lambda: datatrove_reference(f"{work}/hf"))
        del judge
        judge, their_warm, _ = timed(lambda: datatrove_reference(f"{work}/hf"))
        started = time.perf_counter()
        theirs = [judge(u) for u in urls]
        their_seconds = time.perf_counter() - started
    mine = dict(zip(result.removed["id"].to_pylist(), result.removed["drop_reason"].to_pylist()))
    differ = sum(reason != mine.get(str(i)) for i, reason in enumerate(theirs))
    hosts = len({u.split("//")[-1].split("/")[0] for u in urls})
    print(f"{len(urls)} URLs ({hosts} distinct hosts), {len(mine)} dropped; one core")
    print(f"{'':<38}{'setup cold s':>13}{'setup warm s':>13}{'lists RSS MB':>13}{'URLs/s':>10}")
    for name, c, w, mb, seconds in [("datatrove 0.10 URLFilter (baseline)", their_cold, their_warm, their_mb, their_seconds),
                                    ("url_filter stage", cold, warm, ours_mb, ours_seconds)]:  # fmt: skip
        print(f"{name:<38}{c:>13.2f}{w:>13.2f}{mb:>13.0f}{len(urls) / seconds:>10.0f}")
    print(f"ratio: {their_seconds / ours_seconds:.2f}x URLs/s, {their_warm / warm:.0f}x warm setup; our cold build's peak "
          f"RSS +{build_mb:.0f} MB; decisions that differ: {differ}")  # fmt: skip

if __name__ == "__main__":
    main()
