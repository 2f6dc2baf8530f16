import pyarrow as pa
import pyarrow.compute as pc
import pytest

from filters.langid import LanguageFilter, canonical, cld2_probabilities, distribution, load_langid_py, soft_vote
from tests.conftest import SHARED_DATA, shared

@pytest.fixture(scope="module")
def lid() -> LanguageFilter:
    stage = LanguageFilter(LanguageFilter.Params(languages=None, min_score=0.0))
    stage.setup()
    return stage


def test_accuracy_per_language_on_real_sentences(lid, capsys):
    """The stage beside bare lid.176 on one-sentence documents: never worse by more than two sentences in 100 (ru is
    0.995 -> 0.985), and at least 0.93 on every language outside the bs/hr/sr group (bare lid.176: nb 0.77, sw 0.85)."""
    shared("langid/sentences/en.txt")
    stage, bare = {}, {}
    for path in sorted((SHARED_DATA / "langid" / "sentences").glob("*.txt")):
        sentences = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        labels, _ = lid.model.predict([" ".join(s.split()) for s in sentences], k=1)
        bare[path.stem] = sum(canonical(label[0].removeprefix("__label__")) == path.stem for label in labels) / len(sentences)
        stage[path.stem] = sum(language == path.stem for language, *_ in lid.predict(sentences)) / len(sentences)
    with capsys.disabled():
        print("\nlangid accuracy on ../shared/data/langid/sentences (language: stage / bare lid.176)")
        print("  " + "  ".join(f"{lang}={stage[lang]:.3f}/{bare[lang]:.3f}" for lang in stage))
    assert not {lang for lang in stage if stage[lang] < bare[lang] - 0.02}, "worse than bare lid.176"
    low = {lang: stage[lang] for lang in stage if stage[lang] < 0.93 and lang not in ("bs", "hr", "sr")}
    assert not low, f"accuracy below 0.93: {low}"


def test_one_batched_call_gives_each_text_its_own_prediction(lid):
    texts = ["The committee will publish\n its report next week.", "Der Ausschuss veröffentlicht\tseinen Bericht.", "hello",
             "日本語の文章です。"]  # fmt: skip
    expected = []
    for text in texts:
        labels, scores = lid.model.predict(" ".join(text.split()), k=1)
        expected.append((labels[0].removeprefix("__label__"), float(scores[0]), False))
    predicted = lid.predict(texts)
    assert [p for p in predicted if not p[2]] == [e for e, p in zip(expected, predicted) if not p[2]]
    assert sum(voted for *_, voted in predicted) == 1  # "hello": lid.176 is unsure (0.24)


def test_codes_are_canonical_and_the_script_settles_chinese_against_japanese(lid):
    norwegian = "Regjeringen vil legge fram en ny plan for skolen neste år, sa statsministeren i dag."
    labels, _ = lid.model.predict(norwegian, k=1)
    assert labels[0] == "__label__no" and lid.predict([norwegian])[0][0] == "nb"
    for code in ("no", "nb"):  # a recipe may name either
        stage = LanguageFilter(LanguageFilter.Params(languages=[code], min_score=0.0))
        stage.setup()
        assert stage.process(pa.table({"id": ["n"], "text": [norwegian]})).kept.num_rows == 1
    chinese = [line for line in shared("langid/sentences/zh.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    taken_for_japanese = [s for s in chinese if lid.model.predict(s, k=1)[0][0] == "__label__ja"]
    assert taken_for_japanese and all(language == "zh" for language, *_ in lid.predict(taken_for_japanese))
    assert lid.predict(["これは日本語の文章です。漢字もあります。"])[0][0] == "ja"


def test_unsure_documents_go_to_a_vote_of_three_models():
    assert soft_vote({"da": 0.5, "nb": 0.4}, {"nb": 0.9}, {"nb": 0.6, "da": 0.3}) == ("nb", pytest.approx(1.9 / 3))
    assert soft_vote({"da": 0.6}, {}, {"sv": 0.5}) == ("da", pytest.approx(0.2))  # no opinion from CLD2
    # a rare look-alike needs ten times the evidence of the common language
    assert soft_vote({"ms": 0.8, "id": 0.2}, {"ms": 0.9}, {"ms": 0.7, "id": 0.3})[0] == "id"
    assert soft_vote({"ms": 0.9}, {"ms": 1.0}, {"ms": 0.9, "id": 0.05})[0] == "ms"
    assert distribution([("no", 0.3), ("nb", 0.2), ("sv", 0.1)]) == {"nb": 0.5, "sv": 0.1}
    assert cld2_probabilities("bad \x01 control") == {}  # CLD2 rejects control characters: no opinion
    assert cld2_probabilities("\udc80 lone surrogate") == {}
    english = cld2_probabilities("The committee will publish its annual report on public libraries next week.")
    assert max(english, key=english.get) == "en"


def test_filter_keeps_configured_languages_above_threshold():
    stage = LanguageFilter(LanguageFilter.Params(languages=["en", "de"], min_score=0.65))
    table = pa.table(
        {
            "id": ["a", "b", "c", "d", "e"],
            "text": [
                "The committee will publish its annual report on the state of public libraries next week.",
                "Der Ausschuss veröffentlicht nächste Woche seinen Jahresbericht über die öffentlichen Bibliotheken.",
                "Le comité publiera la semaine prochaine son rapport annuel sur les bibliothèques publiques.",
                "lol",
                "   ",
            ],
        }
    )
    result = stage.process(table)
    assert result.kept["id"].to_pylist() == ["a", "b"]
    assert result.kept["language"].to_pylist() == ["en", "de"]
    assert all(score >= 0.65 for score in result.kept["language_score"].to_pylist())
    assert result.dropped == {"language_not_kept": 1, "low_language_score": 1, "empty_text": 1}
    assert result.removed["id"].to_pylist() == ["c", "d", "e"]
    assert result.removed["drop_reason"].to_pylist()[-1] == "empty_text"


def test_lid_alone_when_never_consulting_others():
    stage = LanguageFilter(LanguageFilter.Params(languages=None, consult_below=0.0))
    stage.setup()
    assert stage.langid_py is None
    labels, scores = stage.model.predict("hello", k=1)
    assert stage.predict(["hello"]) == [(canonical(labels[0].removeprefix("__label__")), float(scores[0]), False)]


def test_a_text_of_one_or_two_letters_is_undetermined_and_dropped_as_too_short():
    """One-word English "ok" came out Dutch through the vote (lid.176 alone: en 0.63): under 3 letters no model decides
    (single words of 2 letters: 0.50 right), so the stage says `und` and drops it with its own reason."""
    table = pa.table({"id": ["ok", "no", "time", "yes", "cjk"], "text": ["ok", " no!", "12:30", "yes", "日本語"]})
    for languages, kept, other_drops in ((["en"], ["yes"], {"language_not_kept": 1}), (None, ["yes", "cjk"], {})):
        stage = LanguageFilter(LanguageFilter.Params(languages=languages, min_score=0.0))
        stage.setup()
        result = stage.process(table)
        assert result.kept["id"].to_pylist() == kept and result.dropped == {"too_short_for_language": 3} | other_drops
        short = result.removed.filter(pc.equal(result.removed["drop_reason"], "too_short_for_language"))
        assert short["id"].to_pylist() == ["ok", "no", "time"] and set(short["language"].to_pylist()) == {"und"}
        assert set(short["language_score"].to_pylist()) == {0.0}
    every_text = LanguageFilter(LanguageFilter.Params(languages=None, min_score=0.0, min_letters=0))
    every_text.setup()
    assert every_text.predict(["ok"])[0][0] != "und"


def test_missing_model_file_names_the_path(tmp_path):
    stage = LanguageFilter(LanguageFilter.Params(model_path=str(tmp_path / "nope.bin")))
    with pytest.raises(FileNotFoundError, match="nope.bin"):
        stage.setup()


def test_the_unpacked_langid_py_ranks_as_the_packaged_model(tmp_path, monkeypatch):
    """Unpacked into a fresh cache, mapped and read by row, then read again from that cache: the same ranking of every
    language, to the last bit, as langid.py's own loader gives, on real sentences of every language."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    monkeypatch.setenv("CURATE_CACHE", str(tmp_path))
    packaged = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    texts = [line for path in sorted(shared("langid/sentences").glob("*"))[:40] for line in path.read_text().splitlines()[:8]]
    for mapped in (load_langid_py(), load_langid_py()):  # unpacked by the first, read from the cache by the second
        assert [mapped.rank(text) for text in texts] == [packaged.rank(text) for text in texts]
    assert len(list(tmp_path.glob("langid-py/*"))) == 1
