"""HTML -> main text. Trafilatura is FineWeb's choice; resiliparse is ~10x faster and selectable; resiliparse_blocks
is resiliparse with a learned block classifier (filters/extract_blocks.py) and trafilatura for the pages it is
unsure of."""

import functools
import multiprocessing
import re
import signal
import threading
from contextlib import contextmanager
from typing import Literal

import pyarrow as pa
from pydantic import Field, model_validator
from resiliparse.parse.encoding import bytes_to_str, detect_encoding

from filters.base import Annotation, Stage, StageParams

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_\-:.]+)""", re.IGNORECASE)


class ExtractionTimeout(Exception):
    pass


@contextmanager
def _alarm(seconds: float):
    """SIGALRM after `seconds`: the main thread's limit (only it takes signals)."""

    def on_alarm(signum, frame):
        raise ExtractionTimeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def extract_text(backend: str, html: str, fast: bool = False) -> str | None:
    """The main text of one page (extract_page without saying which extractor made it)."""
    return extract_page(backend, html, fast)[0]


def extract_page(backend: str, html: str, fast: bool = False, fallback_unsure: float | None = None) -> tuple[str | None, bool]:
    """The main text of one page, and whether resiliparse_blocks handed it to trafilatura (its share of words in
    blocks the model is unsure of reached `fallback_unsure`; None: never). `fast`: trafilatura without its fallback
    extractors (ExtractParams.trafilatura_fast)."""
    if backend == "resiliparse_blocks":
        from filters.extract_blocks import extract_with_blocks, load_block_model

        text, hand_over = extract_with_blocks(html, load_block_model(), fallback_unsure)
        return (_trafilatura(html, fast), True) if hand_over else (text, False)
    if backend == "trafilatura":
        return _trafilatura(html, fast), False
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(html, main_content=True), False


def _trafilatura(html: str, fast: bool) -> str | None:
    """trafilatura with deduplicate=False: its deduplicate=True (datatrove's setting) drops paragraphs seen in earlier
    calls of the process, so a page's text would depend on the pages before it (a duplicated record came out
    shortened, and neither dedup stage saw the duplicate); repeated text is the dedup stages' job."""
    import trafilatura

    return trafilatura.extract(html, favor_precision=True, include_comments=False, deduplicate=False, fast=fast)


def share_justext_stop_words() -> None:
    """jusText lower-cases the stop list it is given into a frozenset of new strings, cached per process; trafilatura's
    fallback gives it every language's list (154,484 words, lower-case already) and keeps its own tuple of them: the
    words twice, 27 MiB per worker. Where every word is lower-case already, the set is made of the given strings:
    the same set, 11.5 MiB less."""
    import justext.core

    lower_cased = justext.core.define_stoplist
    if getattr(lower_cased, "shares_words", False):
        return
    lower_cased.cache_clear()  # a set it built before (a warm-up page) is not kept beside ours

    @functools.lru_cache(maxsize=128)
    def define_stoplist(stoplist):
        if all(word == word.lower() for word in stoplist):
            return frozenset(stoplist)
        return lower_cased(stoplist)

    define_stoplist.shares_words = True
    justext.core.define_stoplist = define_stoplist


class _ChildExtractor:
    """Extraction in a child process, for callers off the main thread, where no signal can stop a page: a page
    past its limit costs the child, which is killed and replaced."""

    def __init__(self):
        self.pool = None

    def extract(self, backend: str, html: str, fast: bool, fallback: float | None, seconds: float) -> tuple[str | None, bool]:
        if self.pool is None:
            sharing = share_justext_stop_words if backend != "resiliparse" else None
            self.pool = multiprocessing.get_context("spawn").Pool(1, initializer=sharing)
            self.pool.apply(extract_page, (backend, "<p>warm-up</p>"))  # start-up and imports are not the page's time
        try:
            return self.pool.apply_async(extract_page, (backend, html, fast, fallback)).get(timeout=seconds)
        except multiprocessing.TimeoutError:
            self.pool.terminate()
            self.pool = None
            raise ExtractionTimeout from None


def decode_html(payload: bytes, declared_charset: str | None) -> str | None:
    """Declared charset (HTTP header, then <meta>) when it decodes cleanly, else detection; None if undecodable."""
    candidates = []
    if declared_charset:
        candidates.append(declared_charset)
    meta = _META_CHARSET.search(payload[:4096])
    if meta:
        candidates.append(meta.group(1).decode("ascii", "ignore"))
    for charset in candidates:
        try:
            return payload.decode(charset)
        except (LookupError, UnicodeDecodeError):
            continue
    try:
        return bytes_to_str(payload, detect_encoding(payload))
    except (LookupError, UnicodeDecodeError, ValueError):
        return None


class ExtractParams(StageParams):
    backend: Literal["trafilatura", "resiliparse", "resiliparse_blocks"] = Field(
        "trafilatura", description="trafilatura (FineWeb's choice); resiliparse (DCLM's, ~10x cheaper, keeps more "
        "boilerplate); resiliparse_blocks (resiliparse, a learned block classifier, trafilatura for the pages it is "
        "unsure of): see docs/benchmarks.md 'Extraction quality'",
    )  # fmt: skip
    blocks_fallback_unsure: float | None = Field(
        None, ge=0, le=1, description="resiliparse_blocks: a page whose share of words in blocks the model is unsure "
        "of (probability 0.15-0.85) reaches this goes to trafilatura (0.3 sent 7-18% of the development pages, "
        "docs/benchmarks.md); none: never",
    )  # fmt: skip
    timeout_s: float = Field(5.0, ge=0, description="per-document extraction limit; 0 disables it")
    max_html_bytes: int = Field(2_000_000, gt=0, description="larger pages are dropped as html_too_large")
    min_text_chars: int = Field(1, ge=0)
    trafilatura_fast: bool = Field(
        False, description="trafilatura without its fallback extractors (jusText, readability): 0.59-0.64x its CPU "
        "time; on the real WARC slices it keeps 50 of today's 53 pages (the 3 lost fail fineweb-snapshot's page "
        "filters anyway), see docs/benchmarks.md",
    )  # fmt: skip

    @model_validator(mode="after")
    def fast_needs_trafilatura(self) -> "ExtractParams":
        if self.trafilatura_fast and self.backend == "resiliparse":
            raise ValueError("trafilatura_fast applies to backend trafilatura (and resiliparse_blocks' fallback), not resiliparse")
        if self.blocks_fallback_unsure is not None and self.backend != "resiliparse_blocks":
            raise ValueError(f"blocks_fallback_unsure applies to backend resiliparse_blocks, not {self.backend}")
        return self


class HtmlExtractor(Stage):
    name = "extract"
    Params = ExtractParams
    requires = ("id", "html", "charset", "text")
    adds = {"text": pa.string()}
    removes = ("html", "content_type", "charset")

    def setup(self) -> None:
        if self.params.backend != "resiliparse":
            share_justext_stop_words()
        extract_page(self.params.backend, "<p>warm-up</p>")  # the backend's imports (and model), once per worker
        self._child = _ChildExtractor()

    def _extract_limited(self, html: str) -> tuple[str | None, bool]:
        """Within `timeout_s`: by SIGALRM on the main thread (Ray runs tasks there), else in a child process."""
        seconds, backend, fast = self.params.timeout_s, self.params.backend, self.params.trafilatura_fast
        fallback = self.params.blocks_fallback_unsure
        if seconds <= 0:
            return extract_page(backend, html, fast, fallback)
        if threading.current_thread() is threading.main_thread():
            with _alarm(seconds):
                return extract_page(backend, html, fast, fallback)
        return self._child.extract(backend, html, fast, fallback, seconds)

    def _extract_one(self, payload: bytes | None, charset: str | None, text: str | None) -> tuple[str | None, str | None, bool]:
        """(drop reason or None, text, whether resiliparse_blocks handed the page to trafilatura)."""
        if payload is None:  # WET records arrive with text already extracted
            return (None, text, False) if text and len(text) >= self.params.min_text_chars else ("empty_text", None, False)
        if len(payload) > self.params.max_html_bytes:
            return "html_too_large", None, False
        html = decode_html(payload, charset)
        if html is None:
            return "undecodable", None, False
        try:
            extracted, fell_back = self._extract_limited(html)
        except ExtractionTimeout:
            return "extract_timeout", None, False
        except Exception:  # a parser crash on one page must not stop the shard
            return "extract_error", None, False
        extracted = (extracted or "").strip()
        if len(extracted) < max(1, self.params.min_text_chars):
            return "empty_text", None, fell_back
        return None, extracted, fell_back

    def annotate(self, table: pa.Table) -> Annotation:
        reasons, texts, fallbacks = [], [], 0
        for payload, charset, text in zip(
            table["html"].to_pylist(), table["charset"].to_pylist(), table["text"].to_pylist()
        ):
            reason, extracted, fell_back = self._extract_one(payload, charset, text)
            reasons.append(reason)
            texts.append(extracted)
            fallbacks += fell_back
        stats = {"trafilatura_fallbacks": fallbacks} if self.params.backend == "resiliparse_blocks" else {}
        return Annotation(reasons=reasons, columns={"text": texts}, stats=stats)
