import pyarrow as pa
import pytest

from filters.langid import LanguageFilter
from tests.conftest import SHARED_DATA, shared

REQUIRED = ["en", "de", "fr", "es", "ru", "zh", "ja", "ar"]


@pytest.fixture(scope="module")
def lid() -> LanguageFilter:
    stage = LanguageFilter(LanguageFilter.Params(languages=None, min_score=0.0))
    stage.setup()
    return stage


def test_accuracy_per_language_on_real_sentences(lid, capsys):
    shared("langid/sentences/en.txt")
    accuracy = {}
    for path in sorted((SHARED_DATA / "langid" / "sentences").glob("*.txt")):
        sentences = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        correct = sum(language == path.stem for language, _ in lid.predict(sentences))
        accuracy[path.stem] = (correct / len(sentences), len(sentences))
    with capsys.disabled():
        print("\nlid.176 accuracy on ../shared/data/langid/sentences (language: accuracy over n sentences)")
        print("  " + "  ".join(f"{lang}={acc:.3f}/{n}" for lang, (acc, n) in accuracy.items()))
    low = {lang: accuracy[lang][0] for lang in REQUIRED if accuracy[lang][0] < 0.95}
    assert not low, f"accuracy below 0.95: {low}"


def test_one_batched_call_gives_each_text_its_own_prediction(lid):
    texts = ["The committee will publish\n its report next week.", "Der Ausschuss veröffentlicht\tseinen Bericht.", "ok",
             "日本語の文章です。"]  # fmt: skip
    expected = []
    for text in texts:
        labels, scores = lid.model.predict(" ".join(text.split()), k=1)
        expected.append((labels[0].removeprefix("__label__"), float(scores[0])))
    assert lid.predict(texts) == expected


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
    assert taken_for_japanese and all(language == "zh" for language, _ in lid.predict(taken_for_japanese))
    assert lid.predict(["これは日本語の文章です。漢字もあります。"])[0][0] == "ja"


def test_filter_keeps_configured_languages_above_threshold():
    stage = LanguageFilter(LanguageFilter.Params(languages=["en", "de"], min_score=0.65))
    table = pa.table(
        {
            "id": ["a", "b", "c", "d", "e"],
            "text": [
                "The committee will publish its annual report on the state of public libraries next week.",
                "Der Ausschuss veröffentlicht nächste Woche seinen Jahresbericht über die öffentlichen Bibliotheken.",
                "Le comité publiera la semaine prochaine son rapport annuel sur les bibliothèques publiques.",
                "ok",
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


def test_missing_model_file_names_the_path(tmp_path):
    stage = LanguageFilter(LanguageFilter.Params(model_path=str(tmp_path / "nope.bin")))
    with pytest.raises(FileNotFoundError, match="nope.bin"):
        stage.setup()
