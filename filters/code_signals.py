"""Quality signals of a code file, each a column and a recipe threshold: does it parse, and does it carry an obfuscated
or malicious payload.

`parses`: Python's own compiler for Python (the "build passes" proxy that needs no build: it rejects what `ast`
accepts but the interpreter would not run, e.g. `return` outside a function), a tree-sitter grammar for every other
language tree-sitter-language-pack has (null where none). Tree-sitter parses without a preprocessor, so macro-heavy C
and C++ show errors a compiler would not: `drop_unparsable` names the languages whose parse failures drop a file
(by default Python only; the benchmark counts the others). `encoded_literal`: the longest base64 or hex literal, a
payload hidden as data. `decode_exec`: a decode-then-execute pattern (`exec(base64.b64decode(...))`,
`eval(atob(...))`, `marshal.loads`, a packed `eval(function(p,a,c,k,e,...)`). `minified`: a JavaScript/CSS bundle
(`.min.` in its name, or few lines far longer than written code has). Drops count as `signals/<reason>`.
"""

import re
import warnings

import pyarrow as pa
from pydantic import Field

from filters.base import Annotation, Stage, StageParams

# Linguist's names to tree-sitter-language-pack's, where they differ
GRAMMARS = {
    "C++": "cpp", "C#": "csharp", "Objective-C": "objc", "Shell": "bash", "Batchfile": None, "Makefile": "make",
    "Jupyter Notebook": None, "Emacs Lisp": "elisp", "Common Lisp": "commonlisp", "Vim Script": "vim",
    "reStructuredText": "rst", "Protocol Buffer": "proto", "HCL": "hcl", "TSX": "tsx", "Cython": None,
}  # fmt: skip
BASE64 = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{200,}={0,2}")  # hex is a subset; a match starts where a run does
ESCAPED = re.compile(r"(?<!\\x[0-9a-fA-F]{2})(?:\\x[0-9a-fA-F]{2}){100,}")
DECODE_EXEC = re.compile(
    r"\b(?:exec|eval)\s*\(\s*(?:compile\s*\(\s*)?(?:base64\.\w*decode|codecs\.decode|zlib\.decompress|bytes\.fromhex|"
    r"binascii\.\w+|atob|Buffer\.from|unescape|String\.fromCharCode|__import__\(\s*['\"](?:base64|zlib|marshal))|"
    r"\bmarshal\.loads\s*\(|\beval\s*\(\s*function\s*\(\s*p\s*,\s*a\s*,\s*c\s*,\s*k\s*,\s*e",
)
MINIFIED_LANGUAGES = {"JavaScript", "CSS", "TypeScript"}


class CodeSignalParams(StageParams):
    drop_unparsable: list[str] = Field(["Python"], description="languages whose files are dropped when they do not parse")
    max_encoded_literal: int | None = Field(1000, gt=0, description="drop files with a longer base64/hex literal")
    drop_decode_exec: bool = Field(True, description="drop files that execute what they decode")
    drop_minified: bool = Field(True, description="drop minified JavaScript/CSS bundles")
    min_stars: int | None = Field(None, ge=0, description="drop files of repositories with fewer stars (where known)")
    require_tests: bool = Field(False, description="drop files of repositories without tests (needs code_filters first)")


class CodeSignals(Stage):
    name = "code_signals"
    Params = CodeSignalParams
    requires = ("id", "text", "path", "language")
    adds = {"parses": pa.bool_(), "encoded_literal": pa.int32(), "decode_exec": pa.bool_(), "minified": pa.bool_()}

    def setup(self) -> None:
        import tree_sitter_language_pack

        self._pack = tree_sitter_language_pack
        self._grammars = set(tree_sitter_language_pack.SupportedLanguage.__args__)
        self._parsers = {}

    def parses(self, text: str, language: str | None) -> bool | None:
        if language == "Python":
            with warnings.catch_warnings():  # invalid escapes and the like warn; only errors count
                warnings.simplefilter("ignore")
                try:
                    compile(text, "<file>", "exec", dont_inherit=True)
                    return True
                except (SyntaxError, ValueError, MemoryError, RecursionError):
                    return False
        grammar = GRAMMARS.get(language, (language or "").lower())
        if grammar not in self._parsers:
            self._parsers[grammar] = self._pack.get_parser(grammar) if grammar in self._grammars else None
        parser = self._parsers[grammar]
        if parser is None:
            return None
        return not parser.parse(text.encode("utf-8", "surrogatepass")).root_node.has_error

    @staticmethod
    def encoded_literal(text: str) -> int:
        found = BASE64.findall(text) + (ESCAPED.findall(text) if "\\x" in text else [])
        return max(map(len, found), default=0)

    @staticmethod
    def minified(text: str, path: str, language: str | None) -> bool:
        if language not in MINIFIED_LANGUAGES:
            return False
        lines = text.count("\n") + 1
        return ".min." in path.rsplit("/", 1)[-1] or (len(text) > 5000 and len(text) / lines > 300)

    def annotate(self, table: pa.Table) -> Annotation:
        params = self.params
        rows = table.num_rows
        stars = table["stars"].to_pylist() if "stars" in table.column_names else [None] * rows
        tests = table["repo_has_tests"].to_pylist() if "repo_has_tests" in table.column_names else None
        if params.require_tests and tests is None:
            raise ValueError("code_signals: require_tests needs the repo_has_tests column: put code_filters before it")
        columns = {name: [] for name in self.adds}
        reasons = []
        texts, paths, languages = table["text"].to_pylist(), table["path"].to_pylist(), table["language"].to_pylist()
        for row, (text, path, language) in enumerate(zip(texts, paths, languages)):
            text, path = text or "", path or ""
            parses = self.parses(text, language)
            encoded = self.encoded_literal(text)
            decode_exec = ("exec" in text or "eval" in text or "marshal" in text) and DECODE_EXEC.search(text) is not None
            minified = self.minified(text, path, language)
            for name, value in zip(self.adds, (parses, encoded, decode_exec, minified)):
                columns[name].append(value)
            if parses is False and language in params.drop_unparsable:
                reasons.append("signals/parse_error")
            elif params.max_encoded_literal is not None and encoded > params.max_encoded_literal:
                reasons.append("signals/encoded_payload")
            elif params.drop_decode_exec and decode_exec:
                reasons.append("signals/decode_exec")
            elif params.drop_minified and minified:
                reasons.append("signals/minified")
            elif params.min_stars is not None and stars[row] is not None and stars[row] < params.min_stars:
                reasons.append("signals/few_stars")
            elif params.require_tests and not tests[row]:
                reasons.append("signals/no_tests")
            else:
                reasons.append(None)
        parsed = [p for p in columns["parses"] if p is not None]
        stats = {"parse": {"parsed": sum(parsed), "failed": len(parsed) - sum(parsed), "no_grammar": rows - len(parsed)}}
        return Annotation(reasons, columns, stats)
