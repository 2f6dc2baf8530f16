"""C4's bad-words filter, offline and per language, with a soft variant.

The LDNOOBW lists ship in the package (`assets/badwords/`, CC BY 4.0) at the commits datatrove's C4BadWordsFilter
pins (English at 25e679f, the others at 5faf2ba). The `hard` rule is C4's, decided as datatrove does: a document is
dropped when its lowercased text contains a listed word or phrase flanked by non-word characters (or the text's
ends), anywhere for ja, th and zh; C4's allow-list (common subwords of ja and zh) is removed from every list, as
there. The hard rule removes medical, legal and educational text that names a body part or a slur once, so the
`soft` rule drops a document only when at least `min_lines` of its non-empty lines, and more than `max_line_share`
of them, hold a listed word: one mention never drops a page, however short.
A document's list is its `language` column (the langid stage's; `nb` reads Norwegian's `no` list); a language
without a list keeps the document and is counted.
"""

import re
from importlib import resources
from typing import Literal

import pyarrow as pa
from pydantic import Field

from filters.base import Annotation, Stage, StageParams

ALLOW_LIST = {"ja": {"sm", "グロ", "女の子"}, "zh": {"性"}}  # C4's: each filters >10% of its language when listed
UNSPACED = ("ja", "th", "zh")  # no word boundaries to require
ALIASES = {"nb": "no", "nn": "no"}  # the lists name Norwegian `no`


def list_path(language: str):
    return resources.files("filters") / "assets" / "badwords" / ALIASES.get(language, language)


def badwords_pattern(language: str) -> re.Pattern | None:
    """The compiled list of a language (None without one), built as datatrove builds it."""
    path = list_path(language)
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as handle:
        words = {line.strip() for line in handle}
    for allowed in ALLOW_LIST.values():
        words -= allowed
    alternatives = "|".join(re.escape(word) for word in sorted(words))
    if ALIASES.get(language, language) in UNSPACED:
        return re.compile(alternatives)
    return re.compile(r"(?:\W|^)({})(?:\W|$)".format(alternatives))


class BadWordsFilter(Stage):
    class Params(StageParams):
        rule: Literal["hard", "soft"] = Field("soft", description="hard: C4's, any listed word drops; soft: by share of lines")
        max_line_share: float = Field(0.1, ge=0, le=1, description="soft: drop when more of the non-empty lines hold a listed word")
        min_lines: int = Field(2, ge=1, description="soft: ... and at least this many lines do")
        default_language: str = Field("en", description="the list for documents without a `language` column or value")

    name = "badwords"
    adds = {"badword_line_share": pa.float32()}

    def setup(self) -> None:
        self.patterns: dict[str, re.Pattern | None] = {}

    def pattern(self, language: str) -> re.Pattern | None:
        if language not in self.patterns:
            self.patterns[language] = badwords_pattern(language)
        return self.patterns[language]

    def annotate(self, table: pa.Table) -> Annotation:
        default = self.params.default_language
        languages = table["language"].to_pylist() if "language" in table.column_names else [default] * table.num_rows
        reasons, shares, unlisted = [], [], {}
        for text, language in zip(table["text"].to_pylist(), languages):
            language = language or default
            pattern = self.pattern(language)
            if pattern is None:
                unlisted[language] = unlisted.get(language, 0) + 1
                reasons.append(None)
                shares.append(None)
                continue
            lines = [line for line in text.lower().split("\n") if line.strip()]
            hits = sum(1 for line in lines if pattern.search(line))
            shares.append(hits / len(lines) if lines else 0.0)
            # no listed word holds a newline, so C4's search of the whole text finds one exactly when a line holds one
            if self.params.rule == "hard":
                found = hits > 0
            else:
                found = hits >= self.params.min_lines and shares[-1] > self.params.max_line_share
            reasons.append(f"badwords/{ALIASES.get(language, language)}" if found else None)
        return Annotation(reasons, {"badword_line_share": shares}, {f"no_list/{lang}": n for lang, n in unlisted.items()})
