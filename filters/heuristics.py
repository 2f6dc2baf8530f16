"""FineWeb's heuristic filters in one pass: Gopher repetition, Gopher quality, C4 (FineWeb's variant), FineWeb quality.

Same rules, thresholds and order as datatrove's filters in FineWeb's recipe (a test holds us to their decisions),
but each document is tokenized once: datatrove runs spaCy's English tokenizer and sentencizer once per filter and
once per kept line for C4's sentence count; here one `nlp.tokenizer` call per document feeds every rule. Its tokens
are read as numpy columns with per-lexeme flags (a word is tested once per vocabulary, not per occurrence),
n-grams are counted by compiled loops over hash tables, and sentences are counted with the sentencizer's own rule on
those tokens.
A drop is counted as `<filter>/<reason>` with datatrove's reason names (e.g. `gopher_quality/gopher_short_doc`).
"""

import re
import string
import sys
from bisect import bisect_left
from functools import cached_property

import numpy as np
import pyarrow as pa
import regex
from pydantic import BaseModel, ConfigDict, Field

from filters.bare_spacy import bare_spacy
from filters.base import Annotation, Stage, StageParams

# Unicode's Sentence_Terminal plus three Khmer signs: the set datatrove calls TERMINAL_PUNCTUATION (a newer Unicode
# adds a few rare marks to ours); one scan of all code points (matching them one by one took 4 s per import), their
# string decoded from UTF-32 in 0.01 s (joined from chr() it took 0.11 s of each worker's and the driver's start)
TERMINAL_PUNCTUATION = frozenset(
    regex.findall(
        r"\p{Sentence_Terminal}",
        np.arange(sys.maxunicode + 1, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass"),
    )
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
TOKEN_CACHE_LIMIT = 500_000
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
    token_cache_limit: int = Field(
        TOKEN_CACHE_LIMIT, ge=2_000, description="lexemes and text chunks spaCy's tokenizer keeps across documents "
        "before it is rebuilt: memory against speed, never the output. On a synthetic long-tailed corpus (20,000 "
        "documents, 981k word types) 500,000 took 43 s and +276 MiB per worker, 200,000 57 s and +148 MiB, 50,000 68 s "
        "and +90 MiB. At least 2,000: a blank English tokenizer starts with 764 lexemes, and a limit near that would "
        "rebuild it for almost every document")


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


def _not_only_symbols(word: str) -> bool:
    return bool(word.translate(_DELETE_SYMBOLS))


def _has_letter(word: str) -> bool:
    return any(c.isalpha() for c in word)


class Tokens:
    """One spaCy tokenization as numpy columns: token offsets, ORTH ids and lexeme flags (no Token objects)."""

    def __init__(self, doc, attrs: list[int]):
        columns = doc.to_array(attrs).view(np.int64) if len(doc) else np.zeros((0, len(attrs)), np.int64)
        self.starts, self.orths = columns[:, 0], columns[:, 2]
        self.stops = self.starts + columns[:, 1]
        self.space, self.punct, self.sentence_punct, self.content, self.alpha, self.stop_word = (columns[:, 3:] != 0).T

    def __len__(self) -> int:
        return len(self.starts)

    @cached_property
    def _nonspace(self) -> np.ndarray:
        """Non-space tokens (datatrove's words) before each token: _nonspace[b] - _nonspace[a] of them in [a, b)."""
        return np.concatenate([[0], np.cumsum(~self.space)])

    def words_in(self, spans: list[tuple[int, int]]) -> int:
        """Words in the token spans [first, last)."""
        return int(sum(self._nonspace[b] - self._nonspace[a] for a, b in spans))

    def sentences(self, spans: list[tuple[int, int]]) -> int:
        """Sentences in the token spans [first, last), each split on its own as datatrove splits a line: spaCy's
        Sentencizer, where after a sentence mark (".", "!", ...) the next token that is neither punctuation nor a
        mark opens a sentence, then datatrove's drop of whitespace-only sentences."""
        n = len(self)
        index = np.arange(n)
        plain = ~(self.punct | self.sentence_punct)
        # the last plain-or-mark token before each token: a mark there means a sentence mark is pending
        before = np.maximum.accumulate(np.concatenate([[-1], np.where(plain | self.sentence_punct, index, -1)]))[:n]
        span_first, span_stop = np.full(n, n), np.zeros(n, np.int64)
        for a, b in spans:
            span_first[a:b], span_stop[a:b] = a, b
        opens = plain & (before >= span_first) & self.sentence_punct[before]
        firsts = np.flatnonzero(opens | (index == span_first))
        stops = np.minimum(np.append(firsts[1:], n), span_stop[firsts])
        return int(np.count_nonzero(self._nonspace[stops] > self._nonspace[firsts]))


def _covering(starts: list[int], stops: list[int], start: int, end: int) -> tuple[int, int] | None:
    """Token span [first, last) covering exactly chars [start, end) of the text; None if a token straddles an end."""
    first = bisect_left(starts, start)
    if first and stops[first - 1] > start:
        return None
    last = bisect_left(starts, end, first)
    if last > first and stops[last - 1] > end:
        return None
    return first, last


class Words:
    """A document's words: its non-space tokens, as datatrove's strip-and-drop-empty leaves them, with their flags."""

    def __init__(self, text: str, tokens: Tokens):
        word = ~tokens.space
        self.text, self.starts, self.orths = text, tokens.starts[word], tokens.orths[word]
        self.lengths = tokens.stops[word] - self.starts
        self.content, self.alpha, self.stop_word = tokens.content[word], tokens.alpha[word], tokens.stop_word[word]
        self.ends = np.concatenate([[0], np.cumsum(self.lengths)])  # word i is "".join(words)[ends[i]:ends[i + 1]]

    def __len__(self) -> int:
        return len(self.orths)

    def top_gram_chars(self, n: int) -> int:
        from filters.repetition_kernels import top_gram_chars

        return int(top_gram_chars(self.orths, self.ends, n))

    @cached_property
    def _joined(self) -> np.ndarray:
        """The code points of "".join(words), as the uint64 values the repetition kernel reads."""
        codes = np.frombuffer(self.text.encode("utf-32-le", "surrogatepass"), np.uint32)
        return codes[np.arange(self.ends[-1]) + np.repeat(self.starts - self.ends[:-1], self.lengths)].astype(np.uint64)

    def repeated_chars(self, n: int) -> int:
        from filters.repetition_kernels import repeated_chars

        return int(repeated_chars(self._joined, self.ends, n)) if len(self) >= n else 0


class HeuristicFilters(Stage):
    name = "heuristics"
    Params = HeuristicsParams
    adds = {"text": pa.string()}

    def setup(self) -> None:
        with bare_spacy():
            from spacy.pipeline import Sentencizer

        self.sentence_punct = frozenset(Sentencizer.default_punct_chars)
        self.stop_chars = tuple(TERMINAL_PUNCTUATION)
        self._new_tokenizer()

    def _new_tokenizer(self) -> None:
        """A blank English tokenizer whose lexemes carry the flags the rules test, computed once per lexeme."""
        import spacy
        from spacy.attrs import IDX, IS_PUNCT, IS_SPACE, LENGTH, ORTH

        with bare_spacy():
            self.nlp = spacy.blank("en")
        self.nlp.tokenizer.max_cache_size = self.params.token_cache_limit
        self.cached_chunks: set[str] = set()
        flag = self.nlp.vocab.add_flag
        # the columns of Tokens, in its order
        self.attrs = [IDX, LENGTH, ORTH, IS_SPACE, IS_PUNCT, flag(self.sentence_punct.__contains__),
                      flag(_not_only_symbols), flag(_has_letter), flag(STOP_WORDS.__contains__)]  # fmt: skip

    def tokenize(self, text: str) -> Tokens:
        """spaCy's tokenizer with its cache of whitespace-separated chunks kept filled.

        spaCy caches no more of a document's chunks once one is a special case ("It's", "Mr."), so most chunks of
        web text went through its prefix/suffix/infix regexes every time. Each new chunk is tokenized alone first,
        which caches it (unless it is itself a special case); the document's call then reads the cache. The tokens
        are the same, as the cache only memoizes. Lexemes and chunks stay cached across documents (datatrove frees
        them per document, the costliest part of spaCy); the tokenizer is rebuilt when either grows past
        `token_cache_limit`, which bounds memory instead.
        """
        limit = self.params.token_cache_limit
        if len(self.nlp.vocab) > limit or len(self.cached_chunks) > limit:
            self._new_tokenizer()
        new = set(text.split()).difference(self.cached_chunks)
        for chunk in new:
            self.nlp.tokenizer(chunk)
        self.cached_chunks.update(new)
        return Tokens(self.nlp.tokenizer(text), self.attrs)

    # -- Gopher repetition ---------------------------------------------------------------------------------------
    def gopher_repetition(self, text: str, words: Words) -> str | None:
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
        for n, limit in p.top_n_grams:
            if len(words) >= n and words.top_gram_chars(n) / len(text) > limit:
                return f"top_{n}_gram"
        for n, limit in p.dup_n_grams:
            if words.repeated_chars(n) / len(text) > limit:
                return f"duplicated_{n}_n_grams"
        return None

    # -- Gopher quality ------------------------------------------------------------------------------------------
    def gopher_quality(self, text: str, words: Words) -> str | None:
        p = self.params.gopher_quality
        n_words, n_content = len(words), int(np.count_nonzero(words.content))
        if p.min_doc_words and n_content < p.min_doc_words:
            return "gopher_short_doc"
        if p.max_doc_words and n_content > p.max_doc_words:
            return "gopher_long_doc"
        mean_length = int(words.lengths[words.content].sum()) / n_content if n_content else float("nan")
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
        if p.max_non_alpha_words_ratio and int(np.count_nonzero(words.alpha)) / n_words < p.max_non_alpha_words_ratio:
            return "gopher_below_alpha_threshold"
        if p.min_stop_words and len(set(words.orths[words.stop_word].tolist())) < p.min_stop_words:
            return "gopher_enough_stop_words"
        return None

    # -- C4 ----------------------------------------------------------------------------------------------------
    def c4(self, text: str, tokens: Tokens) -> tuple[str | None, str, int]:
        """(reason or None, the kept lines joined, word count of that text). A kept line's sentences and words are
        counted on the document's tokens that cover it exactly, else (a token straddles it, or citations were cut)
        on the line tokenized alone, as datatrove does for every line."""
        p = self.params.c4
        kept, spans, alone, position = [], [], [], 0
        starts, stops = tokens.starts.tolist(), tokens.stops.tolist()
        for raw in text.splitlines(keepends=True):
            line_start, position = position, position + len(raw)
            body = raw.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
            line = body.strip()
            words = line.split()
            if p.max_word_length != -1 and words and max(map(len, words)) > p.max_word_length:
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
            begin = line_start + len(body) - len(body.lstrip())
            span = _covering(starts, stops, begin, begin + len(line)) if cleaned == line else None
            if span:
                spans.append(span)
            else:
                alone.append(self.tokenize(cleaned))
            kept.append(cleaned)
        counted = [(tokens, spans)] + [(line_tokens, [(0, len(line_tokens))]) for line_tokens in alone]
        sentences = sum(t.sentences(s) for t, s in counted) if p.min_num_sentences != -1 else 0
        if sentences < p.min_num_sentences:
            return "too_few_sentences", text, 0
        return None, "\n".join(kept).strip(), sum(t.words_in(s) for t, s in counted)

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
        words = Words(text, tokens)
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
