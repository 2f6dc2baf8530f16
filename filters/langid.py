"""Language ID with fastText lid.176, loaded from a local file (never downloaded at run time).

A document's `language` is its ISO 639-1 code, canonical: lid.176's `no` is written `nb` (its Norwegian is
Bokmål), and a recipe may name either (`ALIASES`). Where lid.176 says Chinese or Japanese of a text with Han
characters, the script decides: kana make it Japanese, Han alone Chinese (one-sentence Chinese is taken for
Japanese 3% of the time on ../shared/data/langid/sentences; the rule costs one regex search). Codes lid.176 has
and ISO 639-1 lacks (e.g. `sh`, `ceb`, `als`) are kept as lid.176 writes them.
"""

import os
import re
from pathlib import Path

import pyarrow as pa
from pydantic import Field

from filters.base import Annotation, Stage, StageParams
from filters.packaged import asset

MODEL_ENV = "CURATE_LID_MODEL"
ALIASES = {"no": "nb"}  # lid.176 label or recipe code -> the code documents get
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


class LangIdParams(StageParams):
    languages: list[str] | None = Field(["en"], description="ISO 639-1 codes to keep (`no` or `nb` for Norwegian Bokmål); "
                                        "null keeps every language")
    min_score: float = Field(0.65, ge=0, le=1)
    model_path: str | None = None


class LanguageFilter(Stage):
    name = "langid"
    Params = LangIdParams
    adds = {"language": pa.string(), "language_score": pa.float32()}

    def setup(self) -> None:
        path = Path(self.params.model_path) if self.params.model_path else default_lid_model()
        self.model = load_fasttext(path)

    def predict(self, texts: list[str]) -> list[tuple[str, float]]:
        """(language, score) of each text, from one fastText call for them all (the same numbers as a call per text).
        Whitespace runs become one space: fastText predicts one line at a time and splits words on whitespace."""
        flat = [" ".join(text.split()) for text in texts]
        labels, scores = self.model.predict(flat, k=1)
        return [(by_script(text, canonical(label[0].removeprefix("__label__"))), float(score[0])) if len(label) else ("unknown", 0.0)
                for text, label, score in zip(flat, labels, scores)]  # fmt: skip

    def annotate(self, table: pa.Table) -> Annotation:
        wanted = {canonical(code) for code in self.params.languages} if self.params.languages else None
        texts = table["text"].to_pylist()
        predictions = iter(self.predict([text for text in texts if text and text.strip()]))
        reasons, languages, scores = [], [], []
        for text in texts:
            if not text or not text.strip():
                reasons.append("empty_text")
                languages.append(None)
                scores.append(None)
                continue
            language, score = next(predictions)
            languages.append(language)
            scores.append(score)
            if wanted is not None and language not in wanted:
                reasons.append("language_not_kept")
            elif score < self.params.min_score:
                reasons.append("low_language_score")
            else:
                reasons.append(None)
        return Annotation(reasons=reasons, columns={"language": languages, "language_score": scores})
