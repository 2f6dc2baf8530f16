"""FineWeb's heuristic filters in one pass: Gopher repetition, Gopher quality, C4 (FineWeb's variant), FineWeb quality.

Same rules, thresholds and order as datatrove's filters in FineWeb's recipe (a test holds us to their decisions),
but each document is tokenized once: datatrove runs spaCy's English tokenizer and sentencizer once per filter and
once per kept line for C4's sentence count; here one `nlp.tokenizer` call per document feeds every rule, sentences
are counted with the sentencizer's own rule on those tokens, and n-grams are slices of one joined string.
A drop is counted as `<filter>/<reason>` with datatrove's reason names (e.g. `gopher_quality/gopher_short_doc`).
"""

import re
import string
import sys
from collections import Counter

import pyarrow as pa
import regex
from pydantic import BaseModel, ConfigDict, Field

from filters.base import Annotation, Stage, StageParams

# Unicode's Sentence_Terminal plus three Khmer signs: the set datatrove calls TERMINAL_PUNCTUATION (a newer Unicode
# adds a few rare marks to ours)
TERMINAL_PUNCTUATION = frozenset(
    chr(c) for c in range(sys.maxunicode + 1) if regex.match(r"\p{Sentence_Terminal}", chr(c))
) | {"\u17d6", "\u17d9", "\u17da"}
# What makes a word "only symbols" for Gopher: ASCII punctuation, control characters but tab and newline, the usual
# typographic and CJK/full-width marks, and terminal punctuation
SYMBOLS = (
    frozenset(string.punctuation)
    | {chr(c) for c in (*range(0, 9), *range(11, 32), *range(127, 160))}
    | set("—–”“„’´«»…►━∶〈〉《》「」【】、。，；：？！（）．～％１")
    | TERMINAL_PUNCTUATION
)
_DELETE_SYMBOLS = str.maketrans("", "", "".join(SYMBOLS))
STOP_WORDS = frozenset(["the", "be", "to", "of", "and", "that", "have", "with"])
CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
VOCAB_LIMIT = 500_000
_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile("\n+")


class _Rules(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = True


class GopherRepetition(_Rules):
    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    top_n_grams: list[tuple[int, float]] = [(2, 0.2), (3, 0.18), (4, 0.16)]
    dup_n_grams: list[tuple[int, float]] = [(5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)]


class GopherQuality(_Rules):
    min_doc_words: int | None = 50
    max_doc_words: int | None = 100_000
    min_avg_word_length: float | None = 3
    max_avg_word_length: float | None = 10
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    max_non_alpha_words_ratio: float | None = 0.8
    min_stop_words: int | None = 2


class C4Quality(_Rules):
    """FineWeb's variant: lines without terminal punctuation are kept (filter_no_terminal_punct off)."""

    filter_no_terminal_punct: bool = False
    remove_citations: bool = True
    min_num_sentences: int = 5
    min_words_per_line: int = 3
    max_word_length: int = 1000
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True


class FineWebQuality(_Rules):
    line_punct_thr: float = 0.12
    line_punct_exclude_zero: bool = False
    short_line_thr: float = 0.67
    short_line_length: int = 30
    char_duplicates_ratio: float = 0.01
    new_line_ratio: float = 0.3


class HeuristicsParams(StageParams):
    gopher_repetition: GopherRepetition = Field(default_factory=GopherRepetition)
    gopher_quality: GopherQuality = Field(default_factory=GopherQuality)
    c4: C4Quality = Field(default_factory=C4Quality)
    fineweb_quality: FineWebQuality = Field(default_factory=FineWebQuality)


def duplicates(items: list[str]) -> tuple[int, int]:
    """(repeated elements, their characters), first occurrences not counted."""
    seen, count, chars = set(), 0, 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        else:
            seen.add(item)
    return count, chars


class Tokens:
    """One spaCy tokenization of a text: token strings and flags, read as arrays (no Token objects)."""

    def __init__(self, text: str, doc):
        from spacy.attrs import IDX, IS_PUNCT, IS_SPACE, LENGTH

        columns = doc.to_array([IDX, LENGTH, IS_PUNCT, IS_SPACE]).tolist() if len(doc) else []
        self.starts = [row[0] for row in columns]
        self.texts = [text[start : start + length] for start, length, _, _ in columns]
        self.punct = [bool(row[2]) for row in columns]
        self.space = [bool(row[3]) for row in columns]

    def words(self) -> list[str]:
        return [w.strip() for w in self.texts if w.strip()]


class HeuristicFilters(Stage):
    name = "heuristics"
    Params = HeuristicsParams
    adds = {"text": pa.string()}

    def setup(self) -> None:
        from spacy.pipeline import Sentencizer

        self.sentence_punct = frozenset(Sentencizer.default_punct_chars)
        self.stop_chars = tuple(TERMINAL_PUNCTUATION)
        self._new_tokenizer()

    def _new_tokenizer(self) -> None:
        import spacy

        self.nlp = spacy.blank("en")

    def tokenize(self, text: str) -> Tokens:
        """Lexemes stay cached across documents (datatrove frees them per document, the costliest part of spaCy);
        the tokenizer is rebuilt when its vocabulary grows past VOCAB_LIMIT, which bounds memory instead."""
        if len(self.nlp.vocab) > VOCAB_LIMIT:
            self._new_tokenizer()
        self.nlp.max_length = len(text) + 10
        return Tokens(text, self.nlp.tokenizer(text))

    # -- Gopher repetition ---------------------------------------------------------------------------------------
    def gopher_repetition(self, text: str, words: list[str]) -> str | None:
        p = self.params.gopher_repetition
        paragraphs = _PARAGRAPHS.split(text.strip())
        count, chars = duplicates(paragraphs)
        if p.dup_para_frac and count / len(paragraphs) > p.dup_para_frac:
            return "dup_para_frac"
        if p.dup_para_char_frac and chars / len(text) > p.dup_para_char_frac:
            return "dup_para_char_frac"
        lines = _LINES.split(text)
        count, chars = duplicates(lines)
        if p.dup_line_frac and count / len(lines) > p.dup_line_frac:
            return "dup_line_frac"
        if p.dup_line_char_frac and chars / len(text) > p.dup_line_char_frac:
            return "dup_line_char_frac"
        # n-grams are slices of one string: " "-joined for the top n-gram, ""-joined for repeated n-grams
        spaced, tight, offset_spaced, offset_tight = " ".join(words), "".join(words), [0], [0]
        for word in words:
            offset_spaced.append(offset_spaced[-1] + len(word) + 1)
            offset_tight.append(offset_tight[-1] + len(word))
        for n, limit in p.top_n_grams:
            if len(words) < n:
                continue
            counts = Counter(spaced[offset_spaced[i] : offset_spaced[i + n] - 1] for i in range(len(words) - n + 1))
            gram, times = counts.most_common(1)[0]
            if len(gram) * times / len(text) > limit:
                return f"top_{n}_gram"
        for n, limit in p.dup_n_grams:
            seen, repeated, index = set(), 0, 0
            while index < len(words) - n + 1:
                gram = tight[offset_tight[index] : offset_tight[index + n]]
                if gram in seen:
                    repeated += len(gram)
                    index += n
                else:
                    seen.add(gram)
                    index += 1
            if repeated / len(text) > limit:
                return f"duplicated_{n}_n_grams"
        return None

    # -- Gopher quality ------------------------------------------------------------------------------------------
    def gopher_quality(self, text: str, words: list[str]) -> str | None:
        p = self.params.gopher_quality
        n_words = len(words)
        content = [w for w in words if w.translate(_DELETE_SYMBOLS)]
        if p.min_doc_words and len(content) < p.min_doc_words:
            return "gopher_short_doc"
        if p.max_doc_words and len(content) > p.max_doc_words:
            return "gopher_long_doc"
        mean_length = sum(len(w) for w in content) / len(content) if content else float("nan")
        if p.min_avg_word_length and mean_length < p.min_avg_word_length:
            return "gopher_below_avg_threshold"
        if p.max_avg_word_length and mean_length > p.max_avg_word_length:
            return "gopher_above_avg_threshold"
        if p.max_symbol_word_ratio and text.count("#") / n_words > p.max_symbol_word_ratio:
            return "gopher_too_many_hashes"
        if p.max_symbol_word_ratio and (text.count("...") + text.count("…")) / n_words > p.max_symbol_word_ratio:
            return "gopher_too_many_ellipsis"
        lines = text.splitlines()
        if p.max_bullet_lines_ratio and sum(s.lstrip().startswith(("•", "-")) for s in lines) / len(lines) > p.max_bullet_lines_ratio:
            return "gopher_too_many_bullets"
        if p.max_ellipsis_lines_ratio and sum(s.rstrip().endswith(("...", "…")) for s in lines) / len(lines) > p.max_ellipsis_lines_ratio:
            return "gopher_too_many_end_ellipsis"
        if p.max_non_alpha_words_ratio and sum(any(c.isalpha() for c in w) for w in words) / n_words < p.max_non_alpha_words_ratio:
            return "gopher_below_alpha_threshold"
        if p.min_stop_words and len(STOP_WORDS.intersection(words)) < p.min_stop_words:
            return "gopher_enough_stop_words"
        return None

    # -- C4 ----------------------------------------------------------------------------------------------------
    def _count_sentences(self, texts: list[str], punct: list[bool], space: list[bool]) -> int:
        """spaCy's Sentencizer rule on a token run, then datatrove's drop of whitespace-only sentences."""
        if not texts:
            return 0
        starts, seen_period = [0], False
        for i, (token, is_punct) in enumerate(zip(texts, punct)):
            in_punct_chars = token in self.sentence_punct
            if seen_period and not is_punct and not in_punct_chars:
                starts.append(i)
                seen_period = False
            elif in_punct_chars:
                seen_period = True
        starts.append(len(texts))
        return sum(not all(space[a:b]) for a, b in zip(starts, starts[1:]))

    def _line_tokens(self, tokens: Tokens, cursor: int, start: int, end: int) -> tuple[int, int, int] | None:
        """Token range [first, last) covering exactly chars [start, end) of the text, from `cursor` on; None if a token straddles."""
        first = cursor
        while first < len(tokens.starts) and tokens.starts[first] < start:
            first += 1
        if first > 0 and tokens.starts[first - 1] + len(tokens.texts[first - 1]) > start and tokens.starts[first - 1] < start:
            return None
        last = first
        while last < len(tokens.starts) and tokens.starts[last] < end:
            last += 1
        if last > first and tokens.starts[last - 1] + len(tokens.texts[last - 1]) > end:
            return None
        return first, last, last

    def c4(self, text: str, tokens: Tokens) -> tuple[str | None, str, int]:
        """(reason or None, the kept lines joined, word count of that text)."""
        p = self.params.c4
        kept, sentences, words_kept, cursor, position = [], 0, 0, 0, 0
        for raw in text.splitlines(keepends=True):
            line_start, position = position, position + len(raw)
            body = raw.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
            line = body.strip()
            words = line.split()
            if p.max_word_length != -1 and any(len(w) > p.max_word_length for w in words):
                continue
            cleaned = CITATION.sub("", line) if p.remove_citations else line
            if p.filter_no_terminal_punct and (not cleaned.endswith((".", "?", "!", '"', "'")) or cleaned.endswith("...")):
                continue
            if len(words) < p.min_words_per_line:
                continue
            lowered = cleaned.lower()
            if p.filter_lorem_ipsum and "lorem ipsum" in lowered:
                return "lorem_ipsum", text, 0
            if p.filter_javascript and "javascript" in lowered:
                continue
            if p.filter_curly_bracket and "{" in cleaned:
                return "curly_bracket", text, 0
            if p.filter_policy and any(phrase in lowered for phrase in POLICY_PHRASES):
                continue
            span = None
            if cleaned == line:
                lead = len(body) - len(body.lstrip())
                span = self._line_tokens(tokens, cursor, line_start + lead, line_start + lead + len(line))
            if span:
                first, last, cursor = span
                texts, punct, space = tokens.texts[first:last], tokens.punct[first:last], tokens.space[first:last]
            else:
                alone = self.tokenize(cleaned)
                texts, punct, space = alone.texts, alone.punct, alone.space
            if p.min_num_sentences != -1:
                sentences += self._count_sentences(texts, punct, space)
            words_kept += sum(1 for t in texts if t.strip())
            kept.append(cleaned)
        if sentences < p.min_num_sentences:
            return "too_few_sentences", text, 0
        return None, "\n".join(kept).strip(), words_kept

    # -- FineWeb quality ---------------------------------------------------------------------------------------
    def fineweb_quality(self, text: str, n_words: int) -> str | None:
        p = self.params.fineweb_quality
        lines = [line for line in text.split("\n") if line.strip() != ""]
        if not lines:
            return "empty"
        ratio = sum(1 for line in lines if line.endswith(self.stop_chars)) / len(lines)
        if ratio < p.line_punct_thr and not (ratio == 0 and p.line_punct_exclude_zero):
            return "line_punct_ratio"
        if sum(1 for line in lines if len(line) <= p.short_line_length) / len(lines) > p.short_line_thr:
            return "short_line_ratio"
        if duplicates(lines)[1] / len(text.replace("\n", "")) > p.char_duplicates_ratio:
            return "char_dup_ratio"
        if n_words == 0 or text.count("\n") / n_words > p.new_line_ratio:
            return "list_ratio"
        return None

    def judge(self, text: str | None) -> tuple[str | None, str | None]:
        """(drop reason, text after C4's line filtering) for one document."""
        if not text:
            return "gopher_repetition/empty", text
        p = self.params
        tokens = self.tokenize(text)
        words = tokens.words()
        if p.gopher_repetition.enabled and (reason := self.gopher_repetition(text, words)):
            return f"gopher_repetition/{reason}", text
        if p.gopher_quality.enabled and (reason := self.gopher_quality(text, words)):
            return f"gopher_quality/{reason}", text
        n_words = len(words)
        if p.c4.enabled:
            reason, text, n_words = self.c4(text, tokens)
            if reason:
                return f"c4/{reason}", text
        if p.fineweb_quality.enabled and (reason := self.fineweb_quality(text, n_words)):
            return f"fineweb_quality/{reason}", text
        return None, text

    def annotate(self, table: pa.Table) -> Annotation:
        reasons, texts = [], []
        for text in table["text"].to_pylist():
            reason, kept_text = self.judge(text)
            reasons.append(reason)
            texts.append(kept_text)
        return Annotation(reasons=reasons, columns={"text": texts})


def datatrove_reference():
    """datatrove's four filters in FineWeb's order and settings, judging one text like `HeuristicFilters.judge`.

    The reference this stage is held to (tests, benchmark); needs `pip install datatrove==0.10.1`.
    """
    from datatrove.data import Document
    from datatrove.pipeline.filters import C4QualityFilter, FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter

    steps = [("gopher_repetition", GopherRepetitionFilter()), ("gopher_quality", GopherQualityFilter()),
             ("c4", C4QualityFilter(filter_no_terminal_punct=False)), ("fineweb_quality", FineWebQualityFilter())]  # fmt: skip

    def judge(text: str) -> tuple[str | None, str]:
        doc = Document(text=text, id="0")
        for name, step in steps:
            verdict = step.filter(doc)
            if verdict is not True:
                return f"{name}/{verdict[1]}", text
        return None, doc.text

    return judge
