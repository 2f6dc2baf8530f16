"""Saved web pages as a source: every page of a folder a document with its sidecar's URL, every other file counted,
the `warc` source reading folders and pages beside WARC files, the CLI's one-line input errors, the real pages of
../shared/corpus/html, and one `curate run extract-only` over a folder on Ray."""

import gzip
import json
import os
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from curation.cli import main, resolve_inputs
from curation.recipe import SourceSpec
from curation.schema import READ_SCHEMA
from curation.sources import ReadResult, sample
from curation.sources.html_pages import HtmlReader, is_page
from curation.sources.readers import read_batches, read_input
from tests.conftest import SHARED_CORPUS, shared


def page(title: str) -> bytes:
    body = " ".join(f"{title} is a paragraph of an article that says something a reader would want to read." for _ in range(8))
    return f"<html><head><title>{title}</title></head><body><article><h1>{title}</h1><p>{body}</p></article></body></html>".encode()


def write(path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


@pytest.fixture
def pages(tmp_path):
    """A folder of pages with every kind of sidecar, and files that are no page."""
    root = tmp_path / "pages"
    write(root / "index.html", page("Index"))
    write(root / "blog" / "post.htm", page("Post"))
    write(root / "blog" / "post.url", "https://example.org/post\nanything after the first line\n")
    write(root / "blog" / "archive.html.gz", gzip.compress(page("Archive")))
    write(root / "blog" / "archive.json", json.dumps({"url": "https://example.org/archive", "title": "Archive"}))
    write(root / "suite" / "case" / "source.xhtml", page("Case"))
    write(root / "suite" / "case" / "expected-metadata.json", json.dumps({"url": "https://example.org/case"}))
    write(root / "bench" / "ground-truth.json", json.dumps({"abc": {"url": "https://example.org/abc", "articleBody": "…"}}))
    write(root / "bench" / "html" / "abc.html.gz", gzip.compress(page("Benchmark")))
    write(root / "bench" / "html" / "def.htm.gz", gzip.compress(page("Unmapped")))
    write(root / "notes.txt", "not a page")
    write(root / "stray.json", json.dumps({"abc": 1}))  # names no page's URL: not a sidecar
    write(root / "orphan.url", "https://example.org/none")  # beside no page of its stem
    write(root / "broken.html.gz", b"\x1f\x8b\x08\x00 not deflate")
    write(root / "blank.html", " \n\t")
    write(root / ".git" / "hidden.html", page("Hidden"))
    return root


def test_every_page_becomes_a_document_with_its_url_and_every_other_file_is_counted(pages):
    result = HtmlReader("local", "web").read(str(pages))
    rows = {row["warc_file"]: row for row in result.table.to_pylist()}
    assert {name: row["url"] for name, row in rows.items()} == {
        "bench/html/abc.html.gz": "https://example.org/abc",  # a mapping of stems in a folder above
        "bench/html/def.htm.gz": "bench/html/def.htm.gz",  # none: its path in the input
        "blog/archive.html.gz": "https://example.org/archive",
        "blog/post.htm": "https://example.org/post",
        "index.html": "index.html",
        "suite/case/source.xhtml": "https://example.org/case",
    }  # fmt: skip
    assert rows["blog/archive.html.gz"]["html"] == page("Archive") and rows["index.html"]["html"] == page("Index")
    assert {(row["content_type"], row["charset"], row["source"], row["snapshot"], row["text"]) for row in rows.values()} == {
        ("text/html", None, "web", "local", None)}  # fmt: skip
    assert result.table.schema.equals(READ_SCHEMA) and len({row["id"] for row in rows.values()}) == 6
    assert result.dropped == {"not_html": 3, "unreadable": 1, "empty_html": 1}
    assert sorted((os.path.relpath(path, pages), reason, size) for path, reason, size in result.removed) == [
        ("blank.html", "empty_html", 3), ("broken.html.gz", "unreadable", 16), ("notes.txt", "not_html", 10),
        ("orphan.url", "not_html", 24), ("stray.json", "not_html", 10),
    ]  # fmt: skip
    assert result.bytes_in == sum(f.stat().st_size for f in pages.rglob("*") if is_page(str(f)) and ".git" not in f.parts)
    again = HtmlReader("local", "web").read(str(pages))
    assert again.table["id"].to_pylist() == result.table["id"].to_pylist() and again.sha256 == result.sha256

    alone = HtmlReader("local", "web").read(str(pages / "blog" / "post.htm"))  # its sidecar still gives its URL
    assert alone.table.select(["url", "warc_file"]).to_pylist() == [
        {"url": "https://example.org/post", "warc_file": str(pages / "blog" / "post.htm")}]  # fmt: skip
    batched = ReadResult(READ_SCHEMA.empty_table())
    tables = list(HtmlReader("local", "web").read_batches(str(pages), 4, batched))
    assert [table.num_rows for table in tables] == [4, 2] and batched.dropped == result.dropped
    assert pa.concat_tables(tables)["id"].to_pylist() == result.table["id"].to_pylist()
    with pytest.raises(FileNotFoundError, match="html input .* does not exist"):
        HtmlReader("local").read(str(pages / "missing"))


def test_pages_given_one_file_each_keep_the_folders_that_tell_them_apart(tmp_path, monkeypatch):
    """Suites save every case as `CASE/source.html`: named one by one (a glob), each page's url and id are its own."""
    for case in ("first", "second"):
        write(tmp_path / "suite" / case / "source.html", page("Same page"))
    monkeypatch.chdir(tmp_path)
    tables = [HtmlReader("local").read(os.path.join("suite", case, "source.html")).table for case in ("first", "second")]
    assert [table["url"][0].as_py() for table in tables] == ["suite/first/source.html", "suite/second/source.html"]
    assert tables[0]["id"] != tables[1]["id"] and tables[0]["warc_file"][0].as_py() == "suite/first/source.html"


def test_a_page_over_the_limit_on_disk_or_gunzipped_is_counted(tmp_path):
    write(tmp_path / "big.html", b"<p>" + b"x" * 2000)
    write(tmp_path / "bomb.html.gz", gzip.compress(b"<p>" + b" " * 100_000))  # 100 kB from a few hundred bytes
    write(tmp_path / "small.html", page("Small"))
    result = HtmlReader("local", max_payload_bytes=1000).read(str(tmp_path))
    assert result.dropped == {"file_too_large": 2} and result.table["warc_file"].to_pylist() == ["small.html"]


def test_a_warc_source_reads_folders_and_pages_as_html_beside_its_warc_files(pages, tmp_path):
    warc = sample.generate(tmp_path / "warc", pages=5, files=1, seed=1)[0]
    spec = SourceSpec(kind="warc", max_payload_bytes=1_000_000)
    folder = read_input(spec, "s", str(pages))
    assert folder.table.num_rows == 6 and folder.dropped["not_html"] == 3
    assert read_input(spec, "s", str(pages / "index.html")).table["url"].to_pylist() == [str(pages / "index.html")]
    assert read_input(spec, "s", str(warc)).table["warc_file"].to_pylist()[0] == str(warc)  # still a WARC file
    batched = ReadResult(READ_SCHEMA.empty_table())
    assert sum(t.num_rows for t in read_batches(SourceSpec(kind="html", batch_documents=5), "s", str(pages), batched)) == 6
    assert batched.bytes_in == folder.bytes_in

    def inputs(kind: str, *patterns: str) -> list[str]:
        args = SimpleNamespace(input=list(patterns), max_files=None, snapshot=None, paths_file=None)
        return resolve_inputs(args, Console(quiet=True), kind)[0]

    assert inputs("warc", str(pages), str(warc)) == sorted([str(pages), str(warc)])
    assert inputs("warc", str(tmp_path / "*")) == [str(pages)]  # the folder of WARC files has no page
    assert inputs("html", str(pages)) == [str(pages)]
    for kind, pattern, message in [
        ("warc", str(tmp_path / "warc"), "is a folder without .html/.htm pages: name its WARC files"),
        ("html", str(tmp_path / "warc"), "has no .html.gz/.htm.gz/.xhtml/.html/.htm pages"),
        ("html", str(tmp_path / "missing"), "does not exist"),
        ("html", "s3://bucket/pages", "a html source reads local folders and files"),
    ]:
        with pytest.raises(SystemExit) as stop:
            inputs(kind, pattern)
        assert message in str(stop.value.code) and "\n" not in str(stop.value.code)


def test_every_page_of_the_shared_corpus_is_a_document_or_a_counted_drop():
    """The pages that extraction suites ship: each one read or counted; the benchmark's pages get their real URLs from
    its ground-truth.json, goose3's from the JSON beside each page."""
    root = shared("html", SHARED_CORPUS)
    result = HtmlReader("corpus").read(str(root))
    files = [os.path.relpath(os.path.join(folder, name), root) for folder, dirs, names in os.walk(root)
             for name in names if not any(part.startswith(".") for part in folder.split(os.sep))]  # fmt: skip
    read = result.table["warc_file"].to_pylist()
    dropped_pages = [os.path.relpath(path, root) for path, _, _ in result.removed if is_page(path)]
    assert sorted(read + dropped_pages) == sorted(filter(is_page, files)) and len(read) > 700
    urls = dict(zip(read, result.table["url"].to_pylist()))
    truth = json.loads((root / "article-extraction-benchmark" / "ground-truth.json").read_text())
    benchmark = {name: url for name, url in urls.items() if name.startswith("article-extraction-benchmark/")}
    assert len(benchmark) == len(truth) == 181
    assert all(url == truth[name.rsplit("/", 1)[1].removesuffix(".html.gz")]["url"] for name, url in benchmark.items())
    goose = json.loads((root / "goose3" / "tests" / "data" / "content" / "test_cnn1.json").read_text())["url"]
    assert urls["goose3/tests/data/content/test_cnn1.html"] == goose
    assert len(set(result.table["id"].to_pylist())) == len(read)


@pytest.mark.slow
def test_curate_run_extract_only_on_a_folder_of_pages(pages, tmp_path):
    output = str(tmp_path / "run")
    assert main(["run", "extract-only", "--input", str(pages), "--output", output, "--num-cpus", "1"]) == 0
    extracted = pq.read_table(f"{output}/01_extract").to_pylist()
    texts = {row["url"]: row["text"] for row in extracted}
    assert "Archive is a paragraph of an article" in texts["https://example.org/archive"]
    assert len(texts) == 6 and all("paragraph of an article" in text for text in texts.values())
    assert "html" not in extracted[0] and {row["source"] for row in extracted} == {"web"}
