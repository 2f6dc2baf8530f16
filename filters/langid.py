"""Language ID with fastText lid.176, loaded from a local file (never downloaded at run time).

A document's `language` is its ISO 639-1 code, canonical: lid.176's `no` is written `nb` (its Norwegian is
Bokmål), and a recipe may name either (`ALIASES`). Where lid.176 says Chinese or Japanese of a text with Han
characters, the script decides: kana make it Japanese, Han alone Chinese (one-sentence Chinese is taken for
Japanese 3% of the time on ../shared/data/langid/sentences; the rule costs one regex search). Codes lid.176 has
and ISO 639-1 lacks (e.g. `sh`, `ceb`, `als`) are kept as lid.176 writes them.

Where lid.176 is unsure (top score below `consult_below`), two offline models of other kinds vote with it: CLD2
(Chromium's, a naive Bayes over quadgrams) and langid.py (byte n-grams; only where lid.176 and CLD2 disagree). Each
gives its top 3 languages with their probabilities (CLD2: the share of the text); the language with the largest sum
wins, and `language_score` is that sum over the number of models. A far rarer look-alike's sum is divided by 10 (`RARE_LOOK_ALIKES`: Common Crawl's language statistics
put Malay and Nynorsk each at a tenth or less of Indonesian and Bokmål). `benchmarks/langid_vote.py` has the figures.

A text of fewer than `min_letters` letters (default 3: "ok", "no", "12:30") has no language to decide: it is `und`
(undetermined, score 0) and dropped as `too_short_for_language`. On single words of ../shared/data/langid/sentences
(`benchmarks/langid_vote.py`) the stage names the language of a 1-letter word 0.40 of the time and of a 2-letter word
0.50 (bare lid.176 0.36 and 0.50), of 3 to 9 letters 0.66-0.69 (lid.176 0.54-0.65); without the rule the vote called
"ok" Dutch.
"""

import json
import mmap
import os
import re
from array import array
from pathlib import Path

import numpy as np
import pyarrow as pa
import pycld2
from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier
from pydantic import Field

from filters.base import Annotation, Stage, StageParams
from filters.packaged import NpyOnDisk, asset, cached, file_digest

MODEL_ENV = "CURATE_LID_MODEL"
ALIASES = {"no": "nb", "iw": "he", "zh-Hant": "zh", "jw": "jv"}  # a model's label or recipe code -> documents' code
RARE_LOOK_ALIKES, RARE_PRIOR = ("ms", "nn"), 0.1  # the look-alikes of id and nb, and their prior relative to them
TOP = 3  # languages each model gives to the vote
KANA, HAN = re.compile(r"[\u3040-\u30ff]"), re.compile(r"[\u4e00-\u9fff]")
UNDETERMINED = "und"  # ISO 639-2's code for a language that cannot be told
UNPACKED_LAYOUT = "npy+bin-2"  # in the cache key of langid.py's unpacked model: a new layout is unpacked anew


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


def load_langid_py() -> LanguageIdentifier:
    """langid.py's model from its arrays, unpacked once per machine into the cache. Read from its LZMA file it took
    each worker 0.7 s and 66 MiB (a 39 MiB automaton, a 27 MiB weight matrix), most of which a worker never touches:
    langid.py is consulted only where lid.176 and CLD2 disagree (1% of the benchmark's pages). Now it loads in ~0.02 s;
    the automaton and its per-state tables (as py3langid's lists, 7 MiB of ints per worker) are memory-mapped, as its
    walk reads them byte by byte, and the weights are read by row (NpyOnDisk): a text needs only its features' rows,
    and mapped they held 16 MiB of each worker's RSS after 8,000 pages."""
    source = MODEL_DIR / MODEL_FILE
    folder = cached("langid-py", file_digest(source, extra=UNPACKED_LAYOUT), lambda staging: _unpack_langid_py(source, staging))
    layout = json.loads((folder / "layout.json").read_text())
    nextmove, rowbase, output = (_mapped(folder / f"{name}.bin", layout[name]) for name in ("nextmove", "rowbase", "output"))
    # the weights by reading (NpyOnDisk): a text reads only its features' rows. Given no rows, py3langid builds an
    # empty list of row offsets; the mapped offsets take its place
    weights = NpyOnDisk(folder / "ptc.npy", "<f2", ndim=2)
    identifier = LanguageIdentifier(weights, np.load(folder / "pc.npy"), layout["classes"], nextmove, output,
                                    norm_probs=True, tk_row=array(layout["row"]))  # fmt: skip
    identifier.tk_row, identifier._rowbase = array(layout["row"], (folder / "row.bin").read_bytes()), rowbase
    return identifier


def _mapped(path: Path, typecode: str) -> memoryview:
    """A read-only map of `path` as `typecode` items: indexing it gives Python ints, as py3langid's arrays and lists do."""
    with open(path, "rb") as file:
        return memoryview(mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)).cast(typecode)


def _unpack_langid_py(source: Path, folder: Path) -> None:
    from py3langid.modelio import load_model

    ptc, pc, classes, nextmove, rows, output = load_model(source)
    np.save(folder / "ptc.npy", np.ascontiguousarray(ptc))
    np.save(folder / "pc.npy", pc)
    (folder / "nextmove.bin").write_bytes(nextmove.tobytes())
    (folder / "row.bin").write_bytes(rows.tobytes())
    (folder / "rowbase.bin").write_bytes(array("i", (row << 8 for row in rows)).tobytes())
    (folder / "output.bin").write_bytes(array("i", output).tobytes())
    layout = {"classes": classes, "nextmove": nextmove.typecode, "row": rows.typecode, "rowbase": "i", "output": "i"}
    (folder / "layout.json").write_text(json.dumps(layout))


def has_letters(text: str, count: int) -> bool:
    """Whether the text has at least `count` letters; reads only as far as the count-th."""
    for character in text:
        if count <= 0:
            return True
        count -= character.isalpha()
    return count <= 0


def by_script(text: str, language: str) -> str:
    """Chinese or Japanese by the script of a Han text: kana are Japanese only."""
    if language in ("ja", "zh") and HAN.search(text):
        return "ja" if KANA.search(text) else "zh"
    return language


def distribution(pairs) -> dict[str, float]:
    """(model's code, probability) pairs by canonical code: two codes of one language add up."""
    probabilities: dict[str, float] = {}
    for code, probability in pairs:
        probabilities[canonical(code)] = probabilities.get(canonical(code), 0.0) + float(probability)
    return probabilities


def cld2_probabilities(text: str) -> dict[str, float]:
    """CLD2's top languages with the share of the text in each; none where it rejects the text (control characters)."""
    try:
        found = pycld2.detect(text, bestEffort=True)[2]
    except (pycld2.error, UnicodeEncodeError):
        return {}
    return distribution((code, percent / 100) for _, code, percent, _ in found if code != "un")


def settled(lid: dict[str, float], cld2: dict[str, float]) -> bool:
    """lid.176 and CLD2 name the same language, not a rare look-alike: langid.py (the slowest) could not outvote both
    on ../shared/data/langid/sentences, and it is consulted on 7% of one-sentence documents instead of 26%."""
    top = max(lid, key=lid.get)
    return bool(cld2) and max(cld2, key=cld2.get) == top and top not in RARE_LOOK_ALIKES


def soft_vote(*distributions: dict[str, float]) -> tuple[str, float]:
    """The language with the largest probability summed over the models (a rare look-alike's sum times RARE_PRIOR),
    and its plain sum over the number of models."""
    total: dict[str, float] = {}
    for distribution in distributions:
        for language, probability in distribution.items():
            total[language] = total.get(language, 0.0) + probability
    choice = max(total, key=lambda language: total[language] * (RARE_PRIOR if language in RARE_LOOK_ALIKES else 1.0))
    return choice, total[choice] / len(distributions)


class LangIdParams(StageParams):
    languages: list[str] | None = Field(["en"], description="ISO 639-1 codes to keep (`no` or `nb` for Norwegian Bokmål); "
                                        "null keeps every language")
    min_score: float = Field(0.65, ge=0, le=1)
    model_path: str | None = None
    consult_below: float = Field(0.9, ge=0, le=1, description="below this lid.176 score CLD2 and langid.py vote too "
                                 "(0 never consults them)")  # fmt: skip
    min_letters: int = Field(3, ge=0, description="texts with fewer letters are language `und` and dropped as "
                             "`too_short_for_language` (0: every text is identified)")  # fmt: skip


class LanguageFilter(Stage):
    name = "langid"
    Params = LangIdParams
    # language_score: lid.176's probability of the language, or where the others voted (language_voted) the mean of
    # the consulted models' probabilities of it
    adds = {"language": pa.string(), "language_score": pa.float32(), "language_voted": pa.bool_()}

    def loaded_files(self) -> list[str]:
        return [self.params.model_path] if self.params.model_path else []

    def setup(self) -> None:
        path = Path(self.params.model_path) if self.params.model_path else default_lid_model()
        self.model = load_fasttext(path)
        # not loaded where it is never consulted; mapped and read by row, a worker holds only what its texts touch
        self.langid_py = load_langid_py() if self.params.consult_below else None

    def predict(self, texts: list[str]) -> list[tuple[str, float, bool]]:
        """(language, score, voted) of each text, from one fastText call for them all (the same numbers as a call per
        text). Whitespace runs become one space: fastText predicts one line at a time and splits words on whitespace."""
        flat = [" ".join(text.split()) for text in texts]
        labels, scores = self.model.predict(flat, k=TOP)
        predictions = []
        for text, label, score in zip(flat, labels, scores):
            if not has_letters(text, self.params.min_letters):
                predictions.append((UNDETERMINED, 0.0, False))
            elif not len(label):
                predictions.append(("unknown", 0.0, False))
            elif score[0] >= self.params.consult_below:
                predictions.append((by_script(text, canonical(label[0].removeprefix("__label__"))), float(score[0]), False))
            else:
                lid = distribution((code.removeprefix("__label__"), p) for code, p in zip(label, score))
                votes = [lid, cld2_probabilities(text)]
                if not settled(*votes):
                    votes.append(distribution(self.langid_py.rank(text)[:TOP]))
                language, mean = soft_vote(*votes)
                predictions.append((by_script(text, language), mean, True))
        return predictions

    def annotate(self, table: pa.Table) -> Annotation:
        wanted = {canonical(code) for code in self.params.languages} if self.params.languages else None
        texts = table["text"].to_pylist()
        predictions = iter(self.predict([text for text in texts if text and text.strip()]))
        reasons, languages, scores, voted = [], [], [], []
        for text in texts:
            if not text or not text.strip():
                reasons.append("empty_text")
                languages.append(None)
                scores.append(None)
                voted.append(None)
                continue
            language, score, by_vote = next(predictions)
            languages.append(language)
            scores.append(score)
            voted.append(by_vote)
            if language == UNDETERMINED:
                reasons.append("too_short_for_language")
            elif wanted is not None and language not in wanted:
                reasons.append("language_not_kept")
            elif score < self.params.min_score:
                reasons.append("low_language_score")
            else:
                reasons.append(None)
        return Annotation(reasons=reasons, columns={"language": languages, "language_score": scores, "language_voted": voted})
