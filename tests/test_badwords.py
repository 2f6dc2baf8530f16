"""The badwords stage: C4's hard rule decided exactly as datatrove's C4BadWordsFilter (given the same lists locally),
the soft rule by share of lines, the allow-list and the Norwegian alias."""

import json

import pyarrow as pa
import pytest

from filters.badwords import BadWordsFilter, list_path
from tests.conftest import shared


def listed(language: str) -> list[str]:
    """The list's single words, read from the shipped file (no word is spelled out in this test)."""
    return sorted(w for w in list_path(language).read_text(encoding="utf-8").split("\n") if w.strip() and " " not in w)


def stage(**params) -> BadWordsFilter:
    return BadWordsFilter(BadWordsFilter.Params(**params))


def documents(texts: list[str], languages: list[str]) -> pa.Table:
    return pa.table({"id": [str(i) for i in range(len(texts))], "text": texts, "language": languages})


def test_hard_rule_matches_datatrove_on_real_text_in_many_languages(monkeypatch):
    """Real documents (DCLM-labelled web text) and sentences of 32 languages, with some lines carrying a listed
    word planted in; the drop decisions are datatrove's, document by document."""
    from datatrove.data import Document
    from datatrove.pipeline.filters import c4_filters

    monkeypatch.setattr(c4_filters, "cached_asset_path_or_download", lambda url, **_: str(list_path(url.rsplit("/", 1)[1])))
    web = [json.loads(line)["text"] for line in shared("quality/labelled_web_text.jsonl").read_text().splitlines()]
    texts, languages = list(web), ["en"] * len(web)
    for path in sorted(shared("langid/sentences/en.txt").parent.glob("*.txt")):
        lines = path.read_text(encoding="utf-8").splitlines()[:200]
        texts += ["\n".join(lines[i : i + 5]) for i in range(0, len(lines), 5)]
        languages += [path.stem] * len(range(0, len(lines), 5))
    for i, language in enumerate(["en", "de", "fr", "ja", "zh", "es", "ru", "th"] * 5):  # plant listed words
        words = listed(language)
        texts[i * 7] += f"\nwhich said {words[(i * 13) % len(words)]} there"
        languages[i * 7] = language
    ours = stage(rule="hard").process(documents(texts, languages))
    dropped_ids = set(ours.removed["id"].to_pylist())
    theirs = c4_filters.C4BadWordsFilter(fail_on_missing_language=False)
    verdicts = [theirs.filter(Document(text=t, id=str(i), metadata={"language": lang})) for i, (t, lang) in enumerate(zip(texts, languages))]
    their_dropped = {str(i) for i, verdict in enumerate(verdicts) if verdict is not True}
    print(f"\nbadwords hard rule on {len(texts)} documents: ours drops {len(dropped_ids)}, datatrove {len(their_dropped)}; "
          f"reasons {ours.dropped}")  # fmt: skip
    assert dropped_ids == their_dropped and len(dropped_ids) >= 40


def test_soft_rule_keeps_a_single_mention_and_drops_a_page_full_of_them():
    words = listed("en")
    clean = [f"Line {i} of a long article about anatomy and medicine, written plainly." for i in range(30)]
    once = "\n".join(clean[:15] + [f"The {words[3]} is described in chapter two."] + clean[15:])
    full = "\n".join(f"{words[i]} {words[i + 1]} click here" for i in range(0, 16, 2)) + "\n" + "\n".join(clean[:4])
    table = documents([once, full, "\n".join(clean)], ["en", "en", "en"])
    soft = stage().process(table)
    assert soft.kept["id"].to_pylist() == ["0", "2"] and soft.dropped == {"badwords/en": 1}
    assert soft.kept["badword_line_share"].to_pylist() == pytest.approx([1 / 31, 0.0])
    hard = stage(rule="hard").process(table)
    assert hard.kept["id"].to_pylist() == ["2"] and hard.dropped == {"badwords/en": 2}


def test_allow_list_alias_and_languages_without_a_list():
    table = documents(["女の子が走る", "性别平等", listed("no")[0] + " her", "hello", "hola"], ["ja", "zh", "nb", None, "xx"])
    result = stage(rule="hard").process(table)
    assert result.kept["id"].to_pylist() == ["0", "1", "3", "4"] and result.dropped == {"badwords/no": 1}
    assert result.stats == {"no_list/xx": 1}


def test_the_sample_snapshot_plants_pages_the_soft_rule_drops_and_mentions_it_keeps(tmp_path):
    import pyarrow.parquet as pq

    from curation.sources import sample

    sample.generate(tmp_path, pages=400, files=1, seed=3)
    truth = pq.read_table(tmp_path / sample.TRUTH_FILE).to_pandas()
    pages = truth[truth.kind.isin(["clean", "spam"])]
    table = documents(list(pages.body), ["en"] * len(pages)).set_column(0, "id", pa.array(list(pages.doc_id)))
    planted = dict(zip(pages.doc_id, pages.badwords))
    soft, hard = stage().process(table), stage(rule="hard").process(table)
    assert {planted[i] for i in soft.removed["id"].to_pylist()} == {"lines"}
    assert sum(kind == "lines" for kind in planted.values()) == len(soft.removed) >= 2
    assert {planted[i] for i in hard.removed["id"].to_pylist()} == {"lines", "mention"}
    assert sum(kind == "mention" for kind in planted.values()) >= 5
