import functools

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.sources.warc import WarcReader
from filters.extract import HtmlExtractor, _ChildExtractor, decode_html, share_justext_stop_words


def raw_table(pages: list[tuple[bytes | None, str | None, str | None]]) -> pa.Table:
    return pa.table(
        {
            "id": [str(i) for i in range(len(pages))],
            "html": pa.array([p[0] for p in pages], pa.binary()),
            "charset": pa.array([p[1] for p in pages], pa.string()),
            "text": pa.array([p[2] for p in pages], pa.string()),
        }
    )


ARTICLE = (
    "<html><body><nav><a href='/'>Home</a> <a href='/about'>About us</a></nav>"
    "<div class='cookie'>We use cookies. Accept all</div><article><h1>Rivers</h1>"
    "<p>The river carries sediment from the mountains down to the delta, where it builds new land every year.</p>"
    "<p>Farmers along the banks have relied on these floods for centuries to renew the soil of their fields.</p>"
    "</article><footer>Copyright 2024. All rights reserved.</footer></body></html>"
)


@pytest.mark.parametrize("backend", ["trafilatura", "resiliparse"])
def test_main_text_without_boilerplate(backend):
    stage = HtmlExtractor(HtmlExtractor.Params(backend=backend))
    result = stage.process(raw_table([(ARTICLE.encode(), "utf-8", None)]))
    text = result.kept["text"][0].as_py()
    assert "sediment from the mountains" in text and "renew the soil" in text
    assert "cookies" not in text and "All rights reserved" not in text
    assert "html" not in result.kept.column_names


def test_trafilatura_fast_skips_the_fallback_extractors():
    """A page of bare divs: trafilatura's own pass finds nothing, its fallbacks find the text; fast mode skips them."""
    page = (
        "<html><body><div class='hero'><div>Common Crawl maintains a free, open repository of web crawl data that "
        "can be used by anyone.</div><div>It is a non-profit founded in 2007 and makes wholesale extraction of open "
        "web data accessible to researchers.</div></div></body></html>"
    ).encode()
    both = raw_table([(page, "utf-8", None), (ARTICLE.encode(), "utf-8", None)])
    default = HtmlExtractor().process(both)
    fast = HtmlExtractor(HtmlExtractor.Params(trafilatura_fast=True)).process(both)
    assert default.kept["id"].to_pylist() == ["0", "1"] and "open repository" in default.kept["text"][0].as_py()
    assert fast.kept["id"].to_pylist() == ["1"] and fast.dropped == {"empty_text": 1}
    assert fast.kept["text"][0] == default.kept["text"][1]


def test_trafilatura_fast_is_refused_for_resiliparse():
    with pytest.raises(ValueError, match="trafilatura_fast applies to backend trafilatura"):
        HtmlExtractor.Params(backend="resiliparse", trafilatura_fast=True)


@pytest.mark.parametrize(
    "text, charset, declared",
    [
        ("Größere Straßen führen über die Brücke nach Süden.", "iso-8859-1", "iso-8859-1"),
        ("Съешь же ещё этих мягких французских булок, да выпей чаю.", "koi8-r", None),
        ("吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。", "shift_jis", None),
    ],
)
def test_non_utf8_pages_decode(text, charset, declared):
    meta = f'<meta charset="{charset}">' if charset == "koi8-r" else ""
    page = f"<html><head>{meta}</head><body><p>{text * 5}</p></body></html>".encode(charset)
    assert text in decode_html(page, declared)


def test_bad_pages_are_dropped_with_their_reason():
    stage = HtmlExtractor(HtmlExtractor.Params(max_html_bytes=10_000, timeout_s=5))
    table = raw_table(
        [
            (ARTICLE.encode(), "utf-8", None),
            (b"<html><body><script>app()</script></body></html>", None, None),
            (b"<html><body>" + b"<p>big page</p>" * 2000 + b"</body></html>", None, None),
            (None, None, "Already extracted text from a WET record."),
            (None, None, None),
            (ARTICLE.replace("sediment", "gravel").replace("Farmers", "Herders").encode("utf-16"), "bogus", None),
        ]
    )
    result = stage.process(table)
    assert result.kept["id"].to_pylist() == ["0", "3", "5"]  # a UTF-16 page under a bogus charset is detected
    assert "gravel" in result.kept["text"][2].as_py()
    assert result.dropped == {"empty_text": 2, "html_too_large": 1}
    assert result.kept.num_rows + sum(result.dropped.values()) == table.num_rows


def test_a_table_extracts_the_same_whatever_ran_before_in_the_process():
    """trafilatura deduplicates paragraphs across documents; that memory must not leak across shards."""
    table = raw_table([(ARTICLE.encode(), "utf-8", None)])
    stage = HtmlExtractor()
    first = stage.process(table).kept
    assert stage.process(table).kept.equals(first)


def test_justext_classifies_with_trafilatura_s_stop_words_not_a_copy():
    """The set jusText makes of trafilatura's all-language stop list is the set it made before, of the same strings;
    a list with capitals is still lower-cased."""
    import justext.core
    import trafilatura.external

    words = trafilatura.external.JT_STOPLIST or trafilatura.external.jt_stoplist_init()  # the tuple trafilatura passes
    lowered = frozenset(word.lower() for word in words)
    share_justext_stop_words()
    shared = justext.core.define_stoplist(words)
    assert shared == lowered
    assert {id(word) for word in shared} == {id(word) for word in words}
    assert justext.core.define_stoplist(("The", "and")) == {"the", "and"}


def test_sharing_the_stop_words_drops_the_set_built_before(monkeypatch):
    """A set jusText built before sharing (the warm-up page's) is not kept beside the shared one."""
    import justext.core

    lowering = functools.lru_cache(maxsize=128)(lambda stoplist: frozenset(word.lower() for word in stoplist))
    monkeypatch.setattr(justext.core, "define_stoplist", lowering)
    lowering(("a", "b"))
    share_justext_stop_words()
    assert lowering.cache_info().currsize == 0 and justext.core.define_stoplist.shares_words


def test_the_child_extracting_off_the_main_thread_shares_the_stop_words_too():
    child = _ChildExtractor()
    assert child.extract("trafilatura", ARTICLE, False, None, 30)[0]
    try:
        assert child.pool.apply(eval, ("__import__('justext.core').core.define_stoplist.shares_words",))
    finally:
        child.pool.terminate()


def test_timeout_drops_the_page_and_the_stage_goes_on():
    stage = HtmlExtractor(HtmlExtractor.Params(timeout_s=1e-6))
    page = ("<html><body>" + "<div><p>deep text here and there</p>" * 3000 + "</div>" * 3000 + "</body></html>").encode()
    result = stage.process(raw_table([(page, "utf-8", None)]))
    assert result.dropped == {"extract_timeout": 1}
    quick = HtmlExtractor(HtmlExtractor.Params(timeout_s=5)).process(raw_table([(ARTICLE.encode(), "utf-8", None)]))
    assert quick.kept.num_rows == 1


def test_sample_pages_of_every_charset_keep_their_text(sample_snapshot):
    truth = pq.read_table(sample_snapshot / "truth.parquet").to_pandas().set_index("doc_id")
    read = [WarcReader("sample").read(str(p)).table for p in sorted(sample_snapshot.glob("*.warc.gz"))]
    result = HtmlExtractor().process(pa.concat_tables(read))
    found = total = 0
    for doc_id, text in zip(result.kept["id"].to_pylist(), result.kept["text"].to_pylist()):
        page = truth.loc[doc_id]
        if page.kind in ("non_utf8", "clean", "foreign"):
            paragraphs = [p[:40] for p in page.body.split("\n\n")]
            hits = sum(p in text for p in paragraphs)
            assert hits, f"no paragraph of {page.url} ({page.charset}) survived extraction"
            found, total = found + hits, total + len(paragraphs)
    assert total > 300 and found / total > 0.85


def test_a_page_extracts_the_same_alone_or_among_others_in_any_order(sample_snapshot):
    """Its text depends on its HTML only: not on the pages before it in the file (trafilatura's deduplicate=True
    would drop paragraphs it had seen in earlier pages of the process)."""
    pages = WarcReader("sample").read(str(sample_snapshot / "sample-0000.warc.gz")).table.slice(0, 30)
    stage = HtmlExtractor()
    alone = [stage.process(pages.slice(i, 1)).kept["text"].to_pylist() for i in range(pages.num_rows)]
    together = stage.process(pages).kept
    doubled_reversed = stage.process(pa.concat_tables([pages, pages]).take(list(range(2 * pages.num_rows))[::-1])).kept
    by_id = dict(zip(together["id"].to_pylist(), together["text"].to_pylist()))
    assert [t[0] if t else None for t in alone] == [by_id.get(i) for i in pages["id"].to_pylist()]
    assert dict(zip(doubled_reversed["id"].to_pylist(), doubled_reversed["text"].to_pylist())) == by_id
    assert len(by_id) > 20
