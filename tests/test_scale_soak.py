"""The soak benchmark's generator and its resume check at a small setting: Common Crawl-shaped WARC files (request,
response and metadata records per page) that our reader takes whole, with duplicates across files, the same bytes for
the same seed; and fineweb-snapshot killed mid-run over them resumes to the uninterrupted run's output."""

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.scale_soak import SoakPages, generate, killed_and_resumed, measure, part_digests, sentence_pool, soak_recipe
from curation.sources.warc import iter_gzip_members, iter_records, parse_http_response, payload_digest


def records(path: Path) -> list:
    with open(path, "rb") as handle:
        return [record for data, problem, _ in iter_gzip_members(handle) if problem is None
                for record, trouble in iter_records(data) if trouble is None]  # fmt: skip


def test_soak_files_hold_common_crawls_records_and_duplicates_across_files(tmp_path):
    files = generate(tmp_path / "a", pages=90, pages_per_file=30, seed=3, sentences=None)
    assert [path.name for path in files] == ["soak-00000.warc.gz", "soak-00001.warc.gz", "soak-00002.warc.gz"]
    kinds, payloads, urls = Counter(), {}, set()
    for path in files:
        found = records(path)
        assert found[0].headers["warc-type"] == "warcinfo"
        assert [r.headers["warc-type"] for r in found[1:]] == ["request", "response", "metadata"] * 30
        for record in found:
            kinds[record.headers["warc-type"]] += 1
            if record.headers["warc-type"] == "response":
                status, _, payload = parse_http_response(record.block)
                assert status == 200 and record.headers["warc-payload-digest"] == payload_digest(payload)
                payloads[record.headers["warc-target-uri"]] = payload
                urls.add(record.headers["warc-target-uri"])
    assert kinds["response"] == len(urls) == 90
    pages = SoakPages(3, sentence_pool(None))
    exact = [i for i in range(90) if pages.kind(i) == "exact"]
    assert exact and all(pages.payload(i) == pages.payload(pages.source(i)) for i in exact)
    assert any(pages.source(i) < 30 <= i for i in range(90) if pages.kind(i) in ("exact", "near"))  # across files
    assert len({pages.article(i)[0] for i in range(90)}) >= 3  # several languages
    sizes = [len(payload) for payload in payloads.values()]
    assert 20_000 < sum(sizes) / len(sizes) < 120_000  # a Common Crawl page's HTML, ~60 KB on average
    again = generate(tmp_path / "b", pages=90, pages_per_file=30, seed=3, sentences=None)
    assert [path.read_bytes() for path in again] == [path.read_bytes() for path in files]


@pytest.mark.slow
def test_a_soak_run_killed_mid_run_resumes_to_the_uninterrupted_output(tmp_path):
    files = generate(tmp_path / "warc", pages=240, pages_per_file=30, seed=5, sentences=None)
    recipe = soak_recipe(tmp_path / "recipe.yaml", "resiliparse")
    whole = measure(files, 240, recipe, tmp_path / "whole", workers=2)
    assert whole["pages"] == 240 and 0 < whole["kept"] < 240 and whole["worker_mib"] > 0 and whole["driver_mib"] > 0
    [(peak, start)] = [value for stage, value in whole["pass_peak_and_start_mib"].items() if stage.endswith("minhash")]
    assert 0 < start <= peak  # the worker's RSS when its largest task started, and its peak during the task
    resumed = killed_and_resumed(files, recipe, tmp_path / "resumed", workers=2, kill_at=0.3)
    assert resumed["killed"] and 0 < resumed["entries_done_at_kill"] < resumed["entries"]
    digests = part_digests(tmp_path / "resumed")
    assert digests and digests == part_digests(tmp_path / "whole")
