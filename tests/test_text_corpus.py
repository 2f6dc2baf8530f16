"""The `rest` source: every supported format on small files, every way a file can fail it, WikiExtractor's output
(generated and the real dump in ../shared/corpus), the CLI's one-line input errors, the Python-docs default corpus,
and one real `curate run text-corpus` on Ray."""

import argparse
import builtins
import gzip
import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from curation import stats
from curation.cli import main, resolve_inputs
from curation.recipe import load_recipe
from curation.sources import local_files, python_docs
from curation.sources.text_corpus import TextReader
from tests.conftest import SHARED_CORPUS, shared
from tests.test_output_readers import load_every_parquet_folder

ERRATA = (
    "Errata for the second edition of this manual are collected by the editors, who read every report and answer "
    "each of them within a week. If you find a mistake in an example, a broken cross reference or a sentence that "
    "is hard to follow, write to jane.doe@example.com and say which section and page it is on. Corrections that "
    "change the meaning of a rule are listed at the start of the next printing, with the name of the reader.\n"
)
PROSE = "A paragraph of a book, long enough to be a document of its own.\n"


def test_every_format_becomes_documents_and_every_bad_file_is_counted(tmp_path):
    (tmp_path / "papers").mkdir()
    (tmp_path / "book.txt").write_text(PROSE)
    (tmp_path / "papers" / "notes.md").write_text("# Notes\n\n" + PROSE)
    (tmp_path / "records.jsonl").write_text(
        json.dumps({"text": PROSE, "id": "r1", "url": "https://example.org/r1"}) + "\n{not json\n\n"
        + json.dumps({"title": "no text"}) + "\n" + json.dumps({"text": "   "}) + "\n" + json.dumps({"text": "Second."}) + "\n"
    )  # fmt: skip
    (tmp_path / "more.jsonl.gz").write_bytes(gzip.compress(json.dumps({"text": "Zipped."}).encode() + b"\n"))
    pq.write_table(pa.table({"text": ["Row one.", None, "Row three."]}), tmp_path / "rows.parquet")
    pq.write_table(pa.table({"body": ["no text column"]}), tmp_path / "other.parquet")
    (tmp_path / "corrupt.parquet").write_bytes(b"PAR1 this is not parquet")
    (tmp_path / "latin.txt").write_bytes("caf\xe9 au lait, s\xfc\xdf".encode("latin-1"))  # a detected charset
    (tmp_path / "noise.md").write_bytes(bytes(range(1, 256)) * 4)  # no NUL byte, no charset: undecodable
    (tmp_path / "blob.txt").write_bytes(b"\x00\x01\x02")
    (tmp_path / "empty.md").write_text("\n\n")
    (tmp_path / "paper.pdf").write_bytes(b"%PDF-1.7")
    result = TextReader("local").read(str(tmp_path))
    rows = {row["url"]: row for row in result.table.to_pylist()}
    assert sorted(rows) == ["book.txt", "https://example.org/r1", "latin.txt", "more.jsonl.gz#0", "papers/notes.md",
                            "records.jsonl#4", "rows.parquet#0", "rows.parquet#2"]  # fmt: skip
    assert rows["latin.txt"]["text"] == "caf\xe9 au lait, s\xfc\xdf"
    assert rows["https://example.org/r1"]["id"] == "r1" and rows["papers/notes.md"]["warc_file"] == "papers/notes.md"
    assert {row["source"] for row in rows.values()} == {"rest"} and rows["book.txt"]["text"] == PROSE
    assert result.dropped == {"bad_json": 2, "empty_text": 3, "bad_parquet": 2, "undecodable": 1, "binary_file": 1, "not_text": 1}
    assert sorted((os.path.relpath(path, tmp_path), reason, size) for path, reason, size in result.removed) == [
        ("blob.txt", "binary_file", 3), ("corrupt.parquet", "bad_parquet", 24), ("empty.md", "empty_text", 2),
        ("noise.md", "undecodable", 1020), ("other.parquet", "bad_parquet", (tmp_path / "other.parquet").stat().st_size),
        ("paper.pdf", "not_text", 8), ("records.jsonl#1", "bad_json", 9), ("records.jsonl#2", "bad_json", 20),
        ("records.jsonl#3", "empty_text", 3), ("rows.parquet#1", "empty_text", 0),
    ]  # which file (or record of one) each drop was, and its bytes  # fmt: skip
    assert result.bytes_in == sum(f.stat().st_size for f in tmp_path.rglob("*") if f.is_file() and f.suffix != ".pdf")
    again = TextReader("local").read(str(tmp_path))
    assert again.table["id"].to_pylist() == result.table["id"].to_pylist() and again.sha256 == result.sha256
    single = TextReader("local").read(str(tmp_path / "book.txt")).table
    assert single["url"].to_pylist() == ["book.txt"] and single["id"].to_pylist() == [rows["book.txt"]["id"]]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        TextReader("local").read(str(tmp_path / "missing"))


def test_wikiextractor_output_is_a_document_per_article(tmp_path):
    """Files of no suffix that start with `<doc `: an article per block, with Wikipedia's id and URL and the title line
    as its heading; an empty block and one cut off are counted and named; any other file of no suffix is `not_text`."""
    (tmp_path / "AA").mkdir()
    (tmp_path / "AB").mkdir()
    (tmp_path / "AA" / "wiki_00").write_text(
        '<doc id="12" url="http://en.wikipedia.org/wiki?curid=12" title="Anarchism">\nAnarchism\n\n' + PROSE + "</doc>\n"
        '<doc id="25" url="http://en.wikipedia.org/wiki?curid=25&amp;x=1" title=""Weird Al" Yankovic">\n"Weird Al"\n'
        "\nMusician.\n</doc>\n"
        '<doc id="39" url="http://en.wikipedia.org/wiki?curid=39" title="Empty">\n\n</doc>\n'
        '<doc id="40" url="http://en.wikipedia.org/wiki?curid=40" title="Cut">\nCut\n\nThe dump ended he'
    )  # fmt: skip
    (tmp_path / "AB" / "wiki_00").write_text('\n <doc id="7" url="u7" title="Seven">\nSeven\n</doc>\n')
    (tmp_path / "AB" / "wiki_01").write_text("<document>not WikiExtractor</document>\n")
    result = TextReader("local").read(str(tmp_path))
    assert result.table.select(["id", "url", "warc_file"]).to_pylist() == [
        {"id": "wiki-12", "url": "http://en.wikipedia.org/wiki?curid=12", "warc_file": "AA/wiki_00"},
        {"id": "wiki-25", "url": "http://en.wikipedia.org/wiki?curid=25&x=1", "warc_file": "AA/wiki_00"},
        {"id": "wiki-7", "url": "u7", "warc_file": "AB/wiki_00"},
    ]  # fmt: skip
    assert result.table["text"].to_pylist() == ["Anarchism\n\n" + PROSE.strip(), '"Weird Al"\n\nMusician.', "Seven"]
    assert sorted((os.path.relpath(path, tmp_path), reason) for path, reason, _ in result.removed) == [
        ("AA/wiki_00#2", "empty_text"), ("AA/wiki_00#3", "unclosed_doc"), ("AB/wiki_01", "not_text")]  # fmt: skip
    assert text_inputs(tmp_path / "AB") == [str(tmp_path / "AB")]  # a folder of WikiExtractor output is an input


def test_the_wikipedia_dump_is_read_an_article_per_doc_block():
    """The 2015 English Wikipedia through WikiExtractor: 3,957 articles in 60 files, every `<doc` block a document."""
    dump = shared("wiki/enwiki-2015/text", SHARED_CORPUS)
    files = sorted(path for path in dump.rglob("wiki_*") if path.is_file())
    blocks = sum(len(re.findall(r"^<doc ", path.read_text(encoding="utf-8"), re.M)) for path in files)
    result = TextReader("wiki").read(str(dump))
    assert (len(files), blocks, result.table.num_rows, dict(result.dropped)) == (60, 3957, 3957, {})
    assert len(set(result.table["id"].to_pylist())) == blocks
    first = result.table.slice(0, 1).to_pylist()[0]
    assert (first["id"], first["url"]) == ("wiki-12", "http://en.wikipedia.org/wiki?curid=12")
    assert first["text"].startswith("Anarchism\n\nAnarchism is")


def text_inputs(*paths) -> list[str]:
    args = argparse.Namespace(input=[str(path) for path in paths], max_files=None, snapshot=None)
    return resolve_inputs(args, Console(quiet=True), "text")[0]


def test_a_latin_1_file_name_is_a_url_and_a_listed_drop(tmp_path):
    """Bytes of a name that are not UTF-8 become U+FFFD, as the code reader names files: one name fails no shard."""
    with open(os.fsencode(tmp_path) + b"/caf\xe9.txt", "wb") as handle:
        handle.write(PROSE.encode())
    with open(os.fsencode(tmp_path) + b"/blob\xe9.txt", "wb") as handle:
        handle.write(b"\x00")
    result = TextReader("local").read(str(tmp_path))
    assert result.table["url"].to_pylist() == ["caf\ufffd.txt"]
    assert result.removed == [(f"{tmp_path}/blob\ufffd.txt", "binary_file", 1)]


def test_a_file_over_the_limit_is_counted_without_being_read(tmp_path, monkeypatch):
    with open(tmp_path / "huge.txt", "wb") as handle:
        handle.truncate(1 << 30)  # sparse: 1 GB on paper, nothing on disk
    (tmp_path / "small.txt").write_text(PROSE)
    opened = []
    spy = lambda file, *args: opened.append(file) or builtins.open(file, *args)  # noqa: E731
    monkeypatch.setattr(local_files, "open", spy, raising=False)  # where the readers open files
    result = TextReader("local").read(str(tmp_path))  # over the default 50 MB
    assert result.dropped == {"file_too_large": 1} and result.table.num_rows == 1
    assert opened == [str(tmp_path / "small.txt")] and result.bytes_in == (1 << 30) + len(PROSE)


@pytest.mark.parametrize("layout, message", [(None, "does not exist"), ([], "has no .txt/.md/"), (["a.pdf"], "has no .txt")])
def test_curate_run_names_a_bad_input_in_one_line(tmp_path, layout, message):
    folder = tmp_path / "rest"
    if layout is not None:
        folder.mkdir()
        for name in layout:
            (folder / name).write_text("x")
    with pytest.raises(SystemExit) as stop:
        main(["run", "text-corpus", "--input", str(folder), "--output", str(tmp_path / "run")])
    assert message in str(stop.value.code) and str(folder) in str(stop.value.code) and "\n" not in str(stop.value.code)


def test_python_docs_are_the_default_corpus(tmp_path):
    first, second = python_docs.ensure(tmp_path / "a"), python_docs.ensure(tmp_path / "b")
    assert len(first) == python_docs.SHARDS and all(os.listdir(path) for path in first)
    for one, two in zip(first, second):
        assert sorted(os.listdir(one)) == sorted(os.listdir(two))
        assert all(open(f"{one}/{n}", "rb").read() == open(f"{two}/{n}", "rb").read() for n in os.listdir(one))
    table = pa.concat_tables(TextReader("python").read(path).table for path in first)
    texts = dict(zip(table["url"].to_pylist(), table["text"].to_pylist()))
    assert len(texts) > 100 and "The \"assert\" statement" in texts["topic-assert.txt"] and "module-json.txt" in texts
    assert sum(len(text.split()) for text in texts.values()) > 50_000
    assert load_recipe("text-corpus").source.kind == "text"


@pytest.mark.slow
def test_curate_run_text_corpus_on_a_folder(tmp_path):
    docs = python_docs.ensure(tmp_path / "docs")[0]
    topics = sorted(name for name in os.listdir(docs) if name.startswith("topic-"))
    folder = tmp_path / "rest"
    folder.mkdir()
    for name in topics:
        (folder / name).write_bytes(open(f"{docs}/{name}", "rb").read())
    (folder / "copy.txt").write_bytes(open(f"{docs}/{topics[0]}", "rb").read())  # an exact duplicate
    (folder / "errata.md").write_text(ERRATA)
    (folder / "bad.jsonl").write_text("{oops\n")
    (folder / "blob.txt").write_bytes(b"\x00\x01")
    output = str(tmp_path / "run")
    assert main(["run", "text-corpus", "--input", str(folder), "--output", output, "--num-cpus", "1", "--keep-removed"]) == 0
    funnel = stats.funnel(stats.load(output))
    assert funnel.loc["00_read", "docs_in"] == len(topics) + 4 and funnel.loc["00_read", "dropped_bad_json"] == 1
    where = os.path.realpath(folder)  # as the CLI resolves it
    dropped = [(f"{where}/bad.jsonl#0", "bad_json", 5), (f"{where}/blob.txt", "binary_file", 2)]
    with open(f"{output}/stats.json") as handle:
        read = json.load(handle)["stages"][0]
    assert [(sample["path"], sample["reason"], sample["bytes"]) for sample in read["drop_samples"]] == dropped
    assert [tuple(row.values()) for row in pq.read_table(f"{output}/removed/00_read").to_pylist()] == dropped
    assert funnel.loc["03_dedup_exact", "docs_in"] - funnel.loc["03_dedup_exact", "docs_out"] >= 1
    kept = pq.read_table(f"{output}/05_pii").to_pandas()
    assert load_every_parquet_folder(tmp_path / "run", tmp_path / "hf")["05_pii"] == len(kept)
    assert len(kept) >= len(topics) // 2 and set(kept.source) == {"rest"}
    errata = kept[kept.url == "errata.md"].text.item()
    assert "email@example.com" in errata and "jane.doe" not in errata
