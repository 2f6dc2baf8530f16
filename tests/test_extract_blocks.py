"""The resiliparse_blocks extractor: resiliparse's main content, a learned block classifier, trafilatura for the pages
it is unsure of; the development sets' scoring; `curate extract train-blocks`."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from curation.extraction_sets import HTML_SETS, SET_NAMES, Page, load_set, page_counts, score
from filters.extract import HtmlExtractor, extract_page
from filters.extract_blocks import MODEL_FILE, BlockModel, load_block_model, main_content_blocks, minimal_html_blocks
from tests.test_extract import ARTICLE, raw_table

NEEDS_SETS = pytest.mark.skipif(not (HTML_SETS / "readability").is_dir(), reason="../shared/corpus/html is absent")


def test_blocks_carry_their_tag_and_the_characters_inside_links():
    page = ("<html><body><nav class='Site-Menu'><a href='/'>Home</a> <a href='/news'>News</a></nav><article>"
            "<p>The river carries sediment from the mountains down to the delta, where it builds new land.</p>"
            "<div class='share-bar'><a href='/t'>Share on Twitter</a></div>"
            "<p>Farmers along the <a href='/banks'>banks</a> have relied on these floods for centuries.</p>"
            "</article></body></html>")  # fmt: skip
    blocks = {block.text: block for block in main_content_blocks(page)}
    river = blocks["The river carries sediment from the mountains down to the delta, where it builds new land."]
    assert river.tag == "p" and river.link_chars == 0
    assert blocks["Share on Twitter"].link_chars == len("Share on Twitter")
    farmers = blocks["Farmers along the banks have relied on these floods for centuries."]
    assert farmers.link_chars == len("banks")
    assert [b.text for b in minimal_html_blocks("<h2>Title &amp; more</h2>loose <b>text</b><ul><li>one</li></ul>")] == [
        "Title & more", "loose text", "one"]  # fmt: skip


def test_the_shipped_model_keeps_the_article_and_drops_the_boilerplate():
    text, fell_back = extract_page("resiliparse_blocks", ARTICLE)
    assert "sediment from the mountains" in text and "renew the soil" in text
    assert "All rights reserved" not in text and "cookies" not in text
    assert not fell_back


def test_unsure_pages_go_to_trafilatura_and_are_counted():
    table = raw_table([(ARTICLE.encode(), "utf-8", None)] * 3)
    every = HtmlExtractor(HtmlExtractor.Params(backend="resiliparse_blocks", blocks_fallback_unsure=0))
    result = every.process(table)
    assert result.stats == {"trafilatura_fallbacks": 3}
    assert result.kept["text"].to_pylist() == HtmlExtractor().process(table).kept["text"].to_pylist()
    never = HtmlExtractor(HtmlExtractor.Params(backend="resiliparse_blocks", blocks_fallback_unsure=None))
    assert never.process(table).stats == {"trafilatura_fallbacks": 0}
    with pytest.raises(ValueError, match="blocks_fallback_unsure applies to backend resiliparse_blocks"):
        HtmlExtractor.Params(backend="resiliparse", blocks_fallback_unsure=0.5)


def test_a_page_that_fails_or_runs_out_of_time_is_dropped_and_counted(monkeypatch):
    deep = ("<html><body>" + "<div><p>deep text here and there</p>" * 3000 + "</div>" * 3000 + "</body></html>").encode()
    slow = HtmlExtractor(HtmlExtractor.Params(backend="resiliparse_blocks", timeout_s=1e-6))
    assert slow.process(raw_table([(deep, "utf-8", None)])).dropped == {"extract_timeout": 1}
    import filters.extract_blocks

    parse = filters.extract_blocks.main_content_blocks

    def crashing_on_one_page(html: str):  # a parser crash, as resiliparse raises on a string it cannot take
        if "CRASH" in html:
            raise TypeError('Parameter "html" is neither string nor HTMLTree.')
        return parse(html)

    monkeypatch.setattr(filters.extract_blocks, "main_content_blocks", crashing_on_one_page)
    stage = HtmlExtractor(HtmlExtractor.Params(backend="resiliparse_blocks"))
    result = stage.process(raw_table([(b"<p>CRASH</p>", "utf-8", None), (b"", None, None), (ARTICLE.encode(), "utf-8", None)]))
    assert result.kept["id"].to_pylist() == ["2"] and result.dropped == {"extract_error": 1, "empty_text": 1}


def test_a_model_made_for_other_features_is_one_line_naming_its_file(tmp_path):
    data = load_block_model().to_json()
    data["features"] = data["features"][:-1]
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=f"{path}: made for other block features"):
        load_block_model(str(path))


def test_the_score_counts_shingles_as_the_article_extraction_benchmark_does():
    reference = "one two three four five six seven eight"
    assert score([page_counts(reference, reference)]) == {"f1": 1.0, "precision": 1.0, "recall": 1.0}
    half = page_counts(reference, "one two three four five")  # 2 of the 5 shingles found, none extra
    assert half == pytest.approx((2 / 5, 0.0, 3 / 5))
    empty = score([page_counts(reference, None), page_counts(reference, reference)])
    assert empty["precision"] == 1.0 and empty["recall"] == 0.5  # an empty extraction counts in recall only


def write_set(root, pages: list[tuple[str, str, str]]) -> None:
    for name, source, expected in pages:
        folder = root / "readability" / "test" / "test-pages" / name
        folder.mkdir(parents=True)
        (folder / "source.html").write_text(source)
        (folder / "expected.html").write_text(expected)
    import gzip

    (root / "article-extraction-benchmark" / "html").mkdir(parents=True)
    truth = {}
    for name, source, expected in pages:
        (root / "article-extraction-benchmark" / "html" / f"{name}.html.gz").write_bytes(gzip.compress(source.encode()))
        truth[name] = {"articleBody": expected, "url": f"https://example.com/{name}"}
    (root / "article-extraction-benchmark" / "ground-truth.json").write_text(json.dumps(truth))


def test_train_blocks_writes_a_model_the_backend_loads(tmp_path):
    """By default into a run folder, saying how to use it: the packaged model changes only where --out names it."""
    words = "river delta farmers floods soil harvest water season village market".split()
    rng = np.random.default_rng(0)
    pages = []
    for i in range(12):
        paragraphs = [" ".join(rng.choice(words, 30)) + "." for _ in range(4)]
        source = ("<html><body><nav class='menu'><a href='/'>Home</a> | <a href='/a'>About</a></nav><article>"
                  + "".join(f"<p>{p}</p>" for p in paragraphs)
                  + "<div class='share'><a href='/s'>Share this</a></div></article>"
                  "<footer>Copyright Example</footer></body></html>")  # fmt: skip
        pages.append((f"page-{i:02d}", source, "\n".join(paragraphs)))
    write_set(tmp_path / "sets", pages)
    assert {p.split for p in load_set("readability", tmp_path / "sets")} == {"train", "heldout"}
    out = tmp_path / "model.json"
    run = subprocess.run([sys.executable, "-m", "curation.cli", "extract", "train-blocks", "--sets", str(tmp_path / "sets"),
                          "--out", str(out)], capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "trained on" in run.stdout and str(out) in run.stdout
    model = load_block_model(str(out))
    assert isinstance(model, BlockModel) and 0 < model.threshold < 1
    splits = {page.name: page.split for name in SET_NAMES for page in load_set(name, tmp_path / "sets")}
    assert model.trained_on == tuple(sorted(name for name, split in splits.items() if split == "train"))
    again = subprocess.run([sys.executable, "-m", "curation.cli", "extract", "train-blocks", "--sets", str(tmp_path / "sets"),
                            "--out", str(tmp_path / "again.json")], capture_output=True, text=True)  # fmt: skip
    assert again.returncode == 0 and (tmp_path / "again.json").read_bytes() == out.read_bytes()  # deterministic
    packaged = MODEL_FILE.read_bytes()
    default = subprocess.run([sys.executable, "-m", "curation.cli", "extract", "train-blocks", "--sets", str(tmp_path / "sets")],
                             capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert default.returncode == 0, default.stderr
    assert MODEL_FILE.read_bytes() == packaged and load_block_model(str(tmp_path / "runs" / "extract-blocks" / "model.json"))
    assert f"`cp runs/extract-blocks/model.json {os.path.relpath(MODEL_FILE, tmp_path)}` to use it" in default.stdout
    missing = subprocess.run([sys.executable, "-m", "curation.cli", "extract", "train-blocks", "--sets", str(tmp_path / "none"),
                              "--out", str(out)], capture_output=True, text=True)  # fmt: skip
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "pass --sets" in missing.stderr


@NEEDS_SETS
def test_the_packaged_model_never_saw_a_held_out_page():
    """benchmarks/extraction_quality.py scores the held-out split: a page named both there and in the model's
    training pages would score the model on what it learnt."""
    pages = [page for name in SET_NAMES for page in load_set(name)]
    trained_on = set(load_block_model().trained_on)
    assert trained_on == {page.name for page in pages if page.split == "train"}
    assert not trained_on & {page.name for page in pages if page.split == "heldout"}


@NEEDS_SETS
@pytest.mark.parametrize("set_name", ["article-extraction-benchmark", "readability"])
def test_held_out_pages_keep_their_main_text(set_name):
    pages: list[Page] = [page for page in load_set(set_name) if page.split == "heldout"][:6]
    counts = [page_counts(page.reference, extract_page("resiliparse_blocks", page.html)[0]) for page in pages]
    assert score(counts)["f1"] > 0.85
