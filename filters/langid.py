"""Language ID with fastText lid.176, loaded from a local file (never downloaded at run time).

A document's `language` is its ISO 639-1 code, canonical: lid.176's `no` is written `nb` (its Norwegian is
Bokmål), and a recipe may name either (`ALIASES`). Where lid.176 says Chinese or Japanese of a text with Han
characters, the script decides: kana make it Japanese, Han alone Chinese (one-sentence Chinese is taken for
Japanese 3% of the time on ../shared/data/langid/sentences; the rule costs one regex search). Codes lid.176 has
and ISO 639-1 lacks (e.g. `sh`, `ceb`, `als`) are kept as lid.176 writes them.

Where lid.176 is unsure (top score below `consult_below`), two offline models of other kinds vote with it: CLD2
(Chromium's, a naive Bayes over quadgrams) and langid.py (byte n-grams); two of three decide, else lid.176 does.
A vote split between a language and a far rarer look-alike goes to the common one (`COMMON_LOOK_ALIKE`): on
one-sentence documents this lifts sw 0.85 -> 0.99, da 0.94 -> 0.99, id 0.92 -> 0.98, nb 0.77 -> 0.90
(`benchmarks/langid_vote.py`).
"""

import os
import re
from pathlib import Path

import pyarrow as pa
import pycld2
from py3langid.langid import MODEL_FILE, LanguageIdentifier
from pydantic import Field

from filters.base import Annotation, Stage, StageParams
from filters.packaged import asset

MODEL_ENV = "CURATE_LID_MODEL"
ALIASES = {"no": "nb", "iw": "he", "zh-Hant": "zh", "jw": "jv"}  # a model's label or recipe code -> documents' code
# Common Crawl's language statistics: Indonesian pages outnumber Malay, Bokmål Nynorsk, each by 10x or more
COMMON_LOOK_ALIKE = {"ms": "id", "nn": "nb"}
KANA, HAN = re.compile(r"[\u3040-\u30ff]"), re.compile(r"[\u4e00-\u9fff]")


def canonical(code: str) -> str:
    return ALIASES.get(code, code)


def default_lid_model() -> Path:
    """$CURATE_LID_MODEL, else the lid.176.ftz shipped in filters/assets/langid/ (CC BY-SA 3.0, fastText's)."""
    if os.environ.get(MODEL_ENV):
        return Path(os.environ[MODEL_ENV])
    return asset("langid", "lid.176.ftz")


def load_fasttext(path: Path):
    if not path.is_file():
        raise FileNotFoundError(
            f"fastText model not found at {path}; set `model_path` in the recipe or ${MODEL_ENV} "
            "(lid.176.bin/.ftz from https://fasttext.cc/docs/en/language-identification.html)"
        )
    import fasttext

    return fasttext.load_model(str(path))


def by_script(text: str, language: str) -> str:
    """Chinese or Japanese by the script of a Han text: kana are Japanese only."""
    if language in ("ja", "zh") and HAN.search(text):
        return "ja" if KANA.search(text) else "zh"
    return language


def cld2_language(text: str) -> str | None:
    """CLD2's best guess, None where it has none (or rejects the text, e.g. control characters)."""
    try:
        code = pycld2.detect(text, bestEffort=True)[2][0][1]
    except (pycld2.error, UnicodeEncodeError):
        return None
    return None if code == "un" else canonical(code)


def vote(lid: str, others: list[str | None]) -> tuple[str, int]:
    """The language two of three name (lid.176's when none does), and how many name it."""
    votes = [lid, *others]
    choice = others[0] if others[0] is not None and others[0] != lid and others.count(others[0]) == 2 else lid
    common = COMMON_LOOK_ALIKE.get(choice)
    if common is not None and common in votes:
        choice = common
    return choice, votes.count(choice)


class LangIdParams(StageParams):
    languages: list[str] | None = Field(["en"], description="ISO 639-1 codes to keep (`no` or `nb` for Norwegian Bokmål); "
                                        "null keeps every language")
    min_score: float = Field(0.65, ge=0, le=1)
    model_path: str | None = None
    consult_below: float = Field(0.9, ge=0, le=1, description="below this lid.176 score CLD2 and langid.py vote too "
                                 "(0 never consults them)")


class LanguageFilter(Stage):
    name = "langid"
    Params = LangIdParams
    # language_score is lid.176's score of its own top label; language_votes, where the others were consulted, is
    # how many of the three models name the language chosen (2 or 3 outvote a low score)
    adds = {"language": pa.string(), "language_score": pa.float32(), "language_votes": pa.int8()}

    def setup(self) -> None:
        path = Path(self.params.model_path) if self.params.model_path else default_lid_model()
        self.model = load_fasttext(path)
        self.langid_py = LanguageIdentifier.from_model_file(MODEL_FILE)

    def predict(self, texts: list[str]) -> list[tuple[str, float, int | None]]:
        """(language, lid.176 score, votes) of each text, from one fastText call for them all (the same numbers as a
        call per text). Whitespace runs become one space: fastText predicts one line at a time and splits words on
        whitespace."""
        flat = [" ".join(text.split()) for text in texts]
        labels, scores = self.model.predict(flat, k=1)
        predictions = []
        for text, label, score in zip(flat, labels, scores):
            if not len(label):
                predictions.append(("unknown", 0.0, None))
                continue
            language, score, votes = canonical(label[0].removeprefix("__label__")), float(score[0]), None
            if score < self.params.consult_below:
                others = [cld2_language(text), canonical(self.langid_py.classify(text)[0])]
                language, votes = vote(language, others)
            predictions.append((by_script(text, language), score, votes))
        return predictions

    def annotate(self, table: pa.Table) -> Annotation:
        wanted = {canonical(code) for code in self.params.languages} if self.params.languages else None
        texts = table["text"].to_pylist()
        predictions = iter(self.predict([text for text in texts if text and text.strip()]))
        reasons, languages, scores, votes = [], [], [], []
        for text in texts:
            if not text or not text.strip():
                reasons.append("empty_text")
                languages.append(None)
                scores.append(None)
                votes.append(None)
                continue
            language, score, agreeing = next(predictions)
            languages.append(language)
            scores.append(score)
            votes.append(agreeing)
            if wanted is not None and language not in wanted:
                reasons.append("language_not_kept")
            elif score < self.params.min_score and (agreeing or 0) < 2:
                reasons.append("low_language_score")
            else:
                reasons.append(None)
        return Annotation(reasons=reasons, columns={"language": languages, "language_score": scores, "language_votes": votes})
