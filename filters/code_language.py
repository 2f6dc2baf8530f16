"""The programming language of each file, as The Stack v2 found it: go-enry (GitHub Linguist's rules: file names,
extensions, shebangs, modelines, then content heuristics and a classifier where an extension is shared, `.h` as C,
C++ or Objective-C). A language given by the input (a Parquet in The Stack's layout) is kept.

The recipe selects languages by Linguist's names; the others are dropped as `language/not_selected` and files no
rule names as `language/unknown`. Stats count every language seen, kept or not, so the funnel shows what a corpus
holds before the selection.
"""

from collections import Counter

import pyarrow as pa
from pydantic import Field

from filters.base import Annotation, Stage, StageParams

# The Stack v2's programming languages that a pretraining mix usually keeps, by Linguist's names, with the
# configuration and markup formats repositories are built from (StarCoder2 kept these too).
DEFAULT_LANGUAGES = [
    "Python", "C", "C++", "Objective-C", "C#", "Java", "JavaScript", "TypeScript", "Go", "Rust", "Ruby", "PHP", "Swift",
    "Kotlin", "Scala", "Lua", "Perl", "R", "Julia", "Haskell", "OCaml", "Fortran", "Shell", "PowerShell", "Batchfile",
    "SQL", "HTML", "CSS", "Tcl", "Makefile", "CMake", "Dockerfile", "Cython", "Jupyter Notebook", "Markdown",
    "reStructuredText",
]  # fmt: skip


class CodeLanguageParams(StageParams):
    languages: list[str] | None = Field(
        default_factory=lambda: list(DEFAULT_LANGUAGES), description="Linguist names to keep; null keeps every language"
    )


class CodeLanguage(Stage):
    name = "code_language"
    Params = CodeLanguageParams
    requires = ("id", "text", "path")
    adds = {"language": pa.string()}
    fills = ("language",)  # a language the source gives (The Stack's) is kept; it fills in the rest

    def setup(self) -> None:
        import enry

        self._detect = enry.get_language
        self._selected = None if self.params.languages is None else set(self.params.languages)

    def annotate(self, table: pa.Table) -> Annotation:
        given = table["language"].to_pylist() if "language" in table.column_names else [None] * table.num_rows
        languages, reasons = [], []
        for text, path, language in zip(table["text"].to_pylist(), table["path"].to_pylist(), given):
            if not language:
                name = (path or "").rsplit("/", 1)[-1]
                language = self._detect(name, (text or "").encode("utf-8", "surrogatepass")) or None
            languages.append(language)
            if language is None:
                reasons.append("language/unknown")
            elif self._selected is not None and language not in self._selected:
                reasons.append("language/not_selected")
            else:
                reasons.append(None)
        seen = Counter(language or "unknown" for language in languages)
        return Annotation(reasons, {"language": languages}, {"languages": dict(seen)})
