"""The built-in sample snapshot: deterministic WARC files of realistic pages with a ground-truth sidecar.

Text comes from what every machine has: English prose from Python's own documentation
(`pydoc_data.topics`), code from the standard library's sources, other languages, PII and names from
Faker's locale word lists, real GSM8K and HumanEval items (the copies shipped for decontamination) leaked into a
few pages. Every page's kind (clean, duplicate, near-duplicate at a measured word-level Jaccard, spam, PII,
benchmark-like, benchmark leak, code, non-UTF-8, non-HTML, error page) is written to `truth.parquet`, with the
clean pages that carry words of the shipped bad-words list (`badwords`: "lines", one in every paragraph, which both
rules drop; "mention", one in the page, which C4's hard rule drops and the soft rule keeps).
"""

import gzip
import html
import json
import inspect
import importlib
import random
import re
import uuid
from importlib import resources
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from faker import Faker

from curation.schema import document_id
from curation.sources.warc import payload_digest
from filters.badwords import list_path
from filters.packaged import asset

SNAPSHOT = "sample"
TRUTH_FILE = "truth.parquet"
VERSION = b"3"  # in truth.parquet's metadata: a sample written by an older generator is written again
KIND_SHARES = [  # (kind, share of pages)
    ("clean", 0.374),
    ("foreign", 0.15),
    ("exact_dup", 0.08),
    ("near_dup", 0.08),
    ("spam", 0.06),
    ("pii", 0.08),
    ("benchmark", 0.04),
    ("leak", 0.006),
    ("code", 0.05),
    ("non_utf8", 0.03),
    ("non_html", 0.02),
    ("http_error", 0.015),
    ("empty", 0.015),
]
FOREIGN_LOCALES = {
    "de": "de_DE", "fr": "fr_FR", "es": "es_ES", "ru": "ru_RU", "zh": "zh_CN", "ja": "ja_JP",
    "it": "it_IT", "pl": "pl_PL", "cs": "cs_CZ", "uk": "uk_UA", "ar": "ar_AA", "nl": "nl_NL",
}  # fmt: skip
NON_UTF8 = [("de", "iso-8859-1", "header"), ("ru", "koi8-r", "meta"), ("ja", "shift_jis", "none")]
CODE_MODULES = ["textwrap", "fnmatch", "shlex", "bisect", "heapq", "colorsys", "calendar", "difflib", "glob", "string"]
SPAM_WORDS = ["cheap", "casino", "bonus", "free", "pills", "loans", "replica", "watches", "discount", "win"]
TRUTH_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()), ("url", pa.string()), ("warc_file", pa.string()), ("warc_record_id", pa.string()),
        ("kind", pa.string()), ("language", pa.string()), ("charset", pa.string()), ("http_status", pa.int32()),
        ("content_type", pa.string()), ("dup_of", pa.string()), ("jaccard", pa.float64()),
        ("pii_types", pa.list_(pa.string())), ("pii_values", pa.list_(pa.string())), ("body", pa.string()),
        ("benchmark_item", pa.string()), ("badwords", pa.string()),
    ],
    metadata={"sample_version": VERSION},
)  # fmt: skip


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def jaccard(a: str, b: str) -> float:
    left, right = words(a), words(b)
    return len(left & right) / len(left | right) if left | right else 1.0


@dataclass
class Page:
    url: str
    kind: str
    language: str
    title: str
    body: str  # the main text, paragraphs separated by blank lines
    status: int = 200
    content_type: str = "text/html"
    charset: str | None = "utf-8"
    charset_in: str = "header"  # header | meta | none
    dup_of: str | None = None
    jaccard: float | None = None
    pii: list[tuple[str, str]] = field(default_factory=list)
    code: bool = False
    payload: bytes = b""
    benchmark_item: str | None = None  # "<benchmark>/<item id>" of a leaked benchmark item, as decontam reports it
    badwords: str | None = None  # "lines": a listed word in every paragraph; "mention": one listed word in the page


class SampleWriter:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.fakers = {}
        self.seed = seed
        self.prose = self._english_prose()
        self.sites = [f"{self._faker('en').domain_word()}-{i}.example.org" for i in range(40)]
        self.leaks, self.leaked, self.spams, self.cleans = 0, set(), 0, 0
        self.listed = [word for word in list_path("en").read_text(encoding="utf-8").split("\n") if word.isalpha()]
        with open(resources.files("datatrove") / "assets" / "banned_words.txt", encoding="utf-8") as handle:
            self.banned_words = [word for line in handle if (word := line.strip()) and word.isalpha()]
        with open(asset("benchmarks", "gsm8k", "test.jsonl"), encoding="utf-8") as gsm8k:
            with gzip.open(asset("benchmarks", "humaneval", "HumanEval.jsonl.gz"), "rt", encoding="utf-8") as humaneval:
                self.benchmark_items = {name: [json.loads(line) for line in handle if line.strip()]
                                        for name, handle in (("gsm8k", gsm8k), ("humaneval", humaneval))}  # fmt: skip

    def _faker(self, language: str) -> Faker:
        if language not in self.fakers:
            fake = Faker(FOREIGN_LOCALES.get(language, "en_US"))
            fake.seed_instance(self.seed * 1000 + len(self.fakers))
            self.fakers[language] = fake
        return self.fakers[language]

    @staticmethod
    def _english_prose() -> list[str]:
        import pydoc_data.topics

        paragraphs = []
        for text in pydoc_data.topics.topics.values():
            for block in re.split(r"\n\s*\n", text):
                letters = sum(ch.isalpha() or ch.isspace() for ch in block) / len(block)
                code_marks = sum(block.count(mark) for mark in '"()[]*`:=')
                prose = letters > 0.9 and code_marks <= 2 and not any(mark in block for mark in ("+--", "|", ">>>"))
                if len(block.split()) >= 25 and prose and not block.startswith((" ", "*")):
                    paragraphs.append(" ".join(block.split()))
        return paragraphs

    def _url(self, index: int) -> str:
        site = self.rng.choice(self.sites)
        slug = "-".join(self._faker("en").words(3))
        return f"https://{site}/{index:05d}/{slug}"

    def clean(self, index: int) -> Page:
        paragraphs = self.rng.sample(self.prose, self.rng.randint(4, 8))
        title = " ".join(paragraphs[0].split()[:6]).rstrip(".,:;")
        return Page(self._url(index), "clean", "en", title, "\n\n".join(paragraphs))

    def foreign(self, index: int, language: str | None = None) -> Page:
        language = language or self.rng.choice(sorted(FOREIGN_LOCALES))
        fake = self._faker(language)
        paragraphs = [fake.paragraph(nb_sentences=self.rng.randint(6, 10)) for _ in range(self.rng.randint(3, 6))]
        return Page(self._url(index), "foreign", language, fake.sentence(nb_words=5), "\n\n".join(paragraphs))

    def near_dup(self, index: int, original: Page) -> Page:
        """Replace words of the original until the word-set Jaccard falls to a drawn target in [0.7, 0.95]."""
        target = self.rng.uniform(0.7, 0.95)
        tokens = original.body.split(" ")
        order = list(range(len(tokens)))
        self.rng.shuffle(order)
        fillers = self._faker("en")
        body = original.body
        for position in order:
            tokens[position] = f"{fillers.word()}{self.rng.randint(10, 99)}"
            body = " ".join(tokens)
            if jaccard(original.body, body) <= target:
                break
        return Page(
            self._url(index), "near_dup", "en", original.title, body, dup_of=original.url,
            jaccard=round(jaccard(original.body, body), 4),
        )  # fmt: skip

    def spam(self, index: int) -> Page:
        fake = self._faker("en")
        lines = []
        for _ in range(self.rng.randint(8, 20)):
            picked = self.rng.sample(SPAM_WORDS, 4)
            lines.append(f"BEST {picked[0].upper()} {picked[1]} {picked[2]}!!! CLICK HERE {fake.url()} {picked[3]} $$$")
        if self.rng.random() < 0.5:
            lines = lines[:2] * self.rng.randint(5, 10)
        self.spams += 1
        url = self._url(index)
        if self.spams % 2:  # half of the spam sits under a URL with one of FineWeb's banned words, for the URL filter
            head, slug = url.rsplit("/", 1)
            url = f"{head}/{self.banned_words[(7 * self.spams) % len(self.banned_words)]}-{slug}"
        return Page(url, "spam", "en", "BEST DEALS " + " ".join(SPAM_WORDS[:3]), "\n\n".join(lines))

    def pii(self, index: int) -> Page:
        page = self.clean(index)
        fake = self._faker("en")
        found = [
            ("EMAIL_ADDRESS", fake.email()), ("PHONE_NUMBER", fake.phone_number()),
            ("IP_ADDRESS", fake.ipv4_public()), ("CREDIT_CARD", fake.credit_card_number(card_type="visa16")),
        ]  # fmt: skip
        name = fake.name()
        contact = (
            f"For questions about this article contact {name} at {found[0][1]} or call {found[1][1]}. "
            f"Our mirror runs at {found[2][1]}. Donations by card {found[3][1]} are welcome."
        )
        page.body += "\n\n" + contact
        page.kind, page.pii = "pii", found + [("PERSON", name)]
        return page

    def benchmark(self, index: int) -> Page:
        fake = self._faker("en")
        problems = []
        for _ in range(self.rng.randint(3, 6)):
            who, a, b, c = fake.first_name(), self.rng.randint(5, 90), self.rng.randint(2, 9), self.rng.randint(1, 20)
            item = self.rng.choice(["apples", "marbles", "stickers", "books", "cupcakes"])
            problems.append(
                f"Question: {who} has {a} {item}. {who} buys {b} boxes with {c} {item} in each box and then gives away "
                f"half of the new {item}. How many {item} does {who} have now? "
                f"Answer: {who} gets {b} * {c} = {b * c} new {item} and keeps {b * c // 2}, so {a} + {b * c // 2} = "
                f"{a + b * c // 2}. #### {a + b * c // 2}"
            )
        return Page(self._url(index), "benchmark", "en", "Math practice problems with answers", "\n\n".join(problems))

    def leak(self, index: int) -> Page:
        """A clean page that quotes a real test item: GSM8K's question and worked answer, or HumanEval's prompt and
        solution, alternately; the decontamination stage must find each one. Items that are mostly numbers or symbols
        are passed over: on a page of prose they would sink it below Gopher's alphabetic-word ratio before decontam."""
        page = self.clean(index)
        page.body = "\n\n".join(dict.fromkeys(self.rng.sample(self.prose, 16)))  # the item is a small part of it
        self.leaks += 1
        benchmark = "gsm8k" if self.leaks % 2 else "humaneval"
        while True:
            row = self.rng.randrange(len(self.benchmark_items[benchmark]))
            item = self.benchmark_items[benchmark][row]
            if benchmark == "gsm8k":
                quoted, item_id = f"{item['question']}\n\nThe answer: {item['answer']}", f"gsm8k/test.jsonl:{row}"
            else:
                quoted, item_id = item["prompt"] + item["canonical_solution"], f"humaneval/{item['task_id']}"
            tokens = quoted.split()
            wordy = sum(bool(re.search(r"[^\W\d_]{2}", token)) for token in tokens) >= 0.85 * len(tokens)
            if wordy and item_id not in self.leaked:
                self.leaked.add(item_id)
                break
        paragraphs = page.body.split("\n\n")
        middle = len(paragraphs) // 2
        body = paragraphs[:middle] + ["A reader sent us this exercise and its solution:", quoted] + paragraphs[middle:]
        page.body, page.kind, page.benchmark_item = "\n\n".join(body), "leak", item_id
        return page

    def code(self, index: int) -> Page:
        module = importlib.import_module(self.rng.choice(CODE_MODULES))
        lines = inspect.getsource(module).splitlines()
        start = self.rng.randrange(0, max(1, len(lines) - 60))
        snippet = "\n".join(lines[start : start + self.rng.randint(30, 60)])
        intro = f"Here is how the {module.__name__} module of the Python standard library does it."
        page = Page(self._url(index), "code", "en", f"Reading {module.__name__}.py", intro + "\n\n" + snippet)
        page.code = True
        return page

    def non_utf8(self, index: int, which: int) -> Page:
        language, charset, where = NON_UTF8[which % len(NON_UTF8)]
        page = self.foreign(index, language)
        page.kind, page.charset, page.charset_in = "non_utf8", charset, where
        return page

    def html(self, page: Page) -> str:
        fake = self._faker("en")
        nav = "".join(f'<li><a href="/{w}">{w.title()}</a></li>' for w in fake.words(6))
        if page.code:
            main = f"<p>{html.escape(page.body.split(chr(10) * 2)[0])}</p>\n<pre><code>{html.escape(page.body.split(chr(10) * 2, 1)[1])}</code></pre>"
        else:
            main = "\n".join(f"<p>{html.escape(p)}</p>" for p in page.body.split("\n\n"))
        meta = f'<meta charset="{page.charset}">' if page.charset_in == "meta" else ""
        related = "".join(f'<li><a href="/post/{i}">{html.escape(fake.sentence(nb_words=4))}</a></li>' for i in range(4))
        lang = page.language if page.language != "unknown" else "en"
        return (
            f'<!DOCTYPE html>\n<html lang="{lang}"><head>{meta}<title>{html.escape(page.title)}</title></head>\n<body>\n'
            f'<header><nav><ul><li><a href="/">Home</a></li>{nav}</ul></nav></header>\n'
            '<div class="cookie-banner">We use cookies to improve your experience. '
            '<button>Accept all</button> <a href="/privacy">Privacy settings</a></div>\n'
            f"<main><article><h1>{html.escape(page.title)}</h1>\n{main}\n</article></main>\n"
            f'<aside><h3>Related posts</h3><ul>{related}</ul></aside>\n'
            f"<footer>&copy; 2024 {html.escape(fake.company())}. All rights reserved. "
            '<a href="/terms">Terms</a> | <a href="/contact">Contact</a></footer>\n</body></html>\n'
        )  # fmt: skip

    def pages(self, count: int) -> list[Page]:
        kinds = []
        for kind, share in KIND_SHARES:
            kinds += [kind] * max(1, round(share * count))
        kinds = (kinds + ["clean"] * count)[:count]
        self.rng.shuffle(kinds)
        originals: list[Page] = []
        pages = []
        for index, kind in enumerate(kinds):
            if kind in ("exact_dup", "near_dup") and not originals:
                kind = "clean"
            if kind == "exact_dup":
                source = self.rng.choice(originals)
                page = Page(self._url(index), "exact_dup", "en", source.title, source.body, dup_of=source.url, jaccard=1.0)
                page.payload = source.payload
            elif kind == "near_dup":
                page = self.near_dup(index, self.rng.choice(originals))
            elif kind == "non_utf8":
                page = self.non_utf8(index, sum(p.kind == "non_utf8" for p in pages))
            elif kind == "non_html":
                page = Page(self._url(index) + ".png", "non_html", "unknown", "", "", content_type="image/png", charset=None)
                page.payload = b"\x89PNG\r\n\x1a\n" + self.rng.randbytes(self.rng.randint(200, 2000))
            elif kind == "http_error":
                page = self.clean(index)
                page.kind, page.status, page.body = "http_error", 404, "Not Found"
            elif kind == "empty":
                page = Page(self._url(index), "empty", "unknown", "", "")
                page.payload = b"<html><head><title></title></head><body><div id='app'></div><script>load()</script></body></html>"
            else:
                page = getattr(self, kind)(index)
            if kind == "clean":
                self.cleans += 1
                if self.cleans % 15 == 0:  # a listed word once, as medical or educational text has it
                    word = self.listed[(11 * self.cleans) % len(self.listed)]
                    page.body += f"\n\nA glossary note: this article mentions the word {word} once, in a quotation."
                    page.badwords = "mention"
                elif self.cleans % 15 == 7:  # a listed word in every paragraph: what the lists are for
                    paragraphs = page.body.split("\n\n")
                    page.body = "\n\n".join(f"{text} And {self.listed[(self.cleans + i) % len(self.listed)]} again."
                                              for i, text in enumerate(paragraphs))  # fmt: skip
                    page.badwords = "lines"
                originals.append(page)
            if not page.payload:
                page.payload = self.html(page).encode(page.charset or "utf-8", errors="xmlcharrefreplace")
            pages.append(page)
        return pages


def _record(headers: list[tuple[str, str]], block: bytes) -> bytes:
    head = "WARC/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + f"Content-Length: {len(block)}\r\n\r\n"
    return gzip.compress(head.encode("utf-8") + block + b"\r\n\r\n", mtime=0)


def generate(out: str | Path, pages: int = 600, files: int = 4, seed: int = 0) -> list[Path]:
    """Write `files` WARC files holding `pages` pages plus truth.parquet; the same arguments give the same bytes."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    writer = SampleWriter(seed)
    all_pages = writer.pages(pages)
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    paths, truth = [], []
    for number in range(files):
        path = out / f"sample-{number:04d}.warc.gz"
        chunk = all_pages[number::files]
        date = (start + timedelta(hours=number)).strftime("%Y-%m-%dT%H:%M:%SZ")
        info = f"software: curate sample\r\nisPartOf: {SNAPSHOT}\r\nseed: {seed}\r\n".encode()
        members = [_record([("WARC-Type", "warcinfo"), ("WARC-Date", date), ("WARC-Filename", path.name),
                            ("WARC-Record-ID", f"<urn:uuid:{uuid.UUID(int=writer.rng.getrandbits(128))}>"),
                            ("Content-Type", "application/warc-fields")], info)]  # fmt: skip
        for page in chunk:
            content_type = page.content_type
            if page.charset and page.charset_in == "header":
                content_type += f"; charset={page.charset}"
            reason = {200: "OK", 404: "Not Found"}[page.status]
            http = (
                f"HTTP/1.1 {page.status} {reason}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(page.payload)}\r\n\r\n"
            ).encode("latin-1") + page.payload
            record_id = f"<urn:uuid:{uuid.UUID(int=writer.rng.getrandbits(128))}>"
            digest = payload_digest(page.payload)
            request = f"GET /{page.url.split('/', 3)[3]} HTTP/1.1\r\nHost: {page.url.split('/')[2]}\r\n\r\n".encode()
            members.append(_record([("WARC-Type", "request"), ("WARC-Date", date), ("WARC-Target-URI", page.url),
                                    ("WARC-Record-ID", f"<urn:uuid:{uuid.UUID(int=writer.rng.getrandbits(128))}>"),
                                    ("Content-Type", "application/http; msgtype=request")], request))  # fmt: skip
            members.append(_record([("WARC-Type", "response"), ("WARC-Date", date), ("WARC-Target-URI", page.url),
                                    ("WARC-Record-ID", record_id), ("WARC-Payload-Digest", digest),
                                    ("WARC-Block-Digest", payload_digest(http)),
                                    ("Content-Type", "application/http; msgtype=response")], http))  # fmt: skip
            truth.append({
                "doc_id": document_id(record_id, page.url, digest), "url": page.url, "warc_file": path.name,
                "warc_record_id": record_id, "kind": page.kind, "language": page.language, "charset": page.charset,
                "http_status": page.status, "content_type": page.content_type, "dup_of": page.dup_of,
                "jaccard": page.jaccard, "pii_types": [t for t, _ in page.pii], "pii_values": [v for _, v in page.pii],
                "body": page.body, "benchmark_item": page.benchmark_item, "badwords": page.badwords,
            })  # fmt: skip
        _write_atomic(path, b"".join(members))
        paths.append(path)
    pq.write_table(pa.Table.from_pylist(truth, schema=TRUTH_SCHEMA), out / TRUTH_FILE)
    return paths


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def ensure(out: str | Path, pages: int, files: int, seed: int = 0) -> list[Path]:
    """Reuse a generated sample when its truth file matches the request, else generate it."""
    out = Path(out)
    truth = out / TRUTH_FILE
    paths = [out / f"sample-{n:04d}.warc.gz" for n in range(files)]
    if truth.exists() and all(p.exists() for p in paths):
        meta = pq.read_metadata(truth)
        if meta.num_rows == pages and (meta.metadata or {}).get(b"sample_version") == VERSION:
            return paths
    return generate(out, pages, files, seed)
