"""The extraction development sets and their score: pages with the text a person says is their main content.

- the article-extraction-benchmark's pages (`html/*.html.gz`, the article body in `ground-truth.json`);
- Mozilla Readability's test pages (`source.html`, the expected extraction in `expected.html`).

Score as the article-extraction-benchmark scores: per page, true/false positives and false negatives of 4-word
shingles (`\\w+` tokens) of the extraction against the reference, normalised to sum to 1 so a long page weighs as a
short one; precision and recall are means over pages, F1 their harmonic mean. Each page falls in `train` or
`heldout` by a hash of its name, so a model trained on one part is judged on the other.
"""

import gzip
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

HTML_SETS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "html"
SET_NAMES = ("article-extraction-benchmark", "readability")
HELDOUT_SHARE = 0.4
_TOKEN = re.compile(r"\w+")


@dataclass(frozen=True)
class Page:
    name: str
    html: str
    reference: str

    @property
    def split(self) -> str:
        fraction = int(hashlib.sha256(self.name.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        return "heldout" if fraction < HELDOUT_SHARE else "train"


def load_set(name: str, root: Path = HTML_SETS) -> list[Page]:
    """One development set's pages, by name (SET_NAMES), in a stable order; FileNotFoundError naming the folder."""
    folder = root / name
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such development set (the shared corpus's html/ folder)")
    if name == "article-extraction-benchmark":
        truth = json.loads((folder / "ground-truth.json").read_text())
        return [Page(key, gzip.decompress((folder / "html" / f"{key}.html.gz").read_bytes()).decode("utf-8", "replace"),
                     truth[key]["articleBody"]) for key in sorted(truth)]  # fmt: skip
    pages = []
    for page in sorted((folder / "test" / "test-pages").iterdir()):
        if (page / "source.html").is_file() and (page / "expected.html").is_file():
            source = (page / "source.html").read_text(errors="replace")
            pages.append(Page(page.name, source, html_text((page / "expected.html").read_text(errors="replace"))))
    return pages


def html_text(html: str) -> str:
    """All the text of an HTML fragment (an expected extraction), blocks on their own lines."""
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(html, preserve_formatting=True, main_content=False, list_bullets=False, alt_texts=False)


def tokens(text: str | None) -> list[str]:
    """The benchmark's tokens: runs of word characters."""
    return _TOKEN.findall(text or "")


def shingles(text: str, n: int = 4) -> Counter:
    words = tokens(text)
    return Counter(tuple(words[i : i + n]) for i in range(max(1, len(words) - n + 1)) if words)


def page_counts(reference: str, extracted: str | None) -> tuple[float, float, float]:
    """(tp, fp, fn) of one page's shingles, normalised to sum to 1 (all 0 when both are empty)."""
    truth, found = shingles(reference), shingles(extracted or "")
    tp = sum((truth & found).values())
    fp = sum((found - truth).values())
    fn = sum((truth - found).values())
    total = tp + fp + fn
    return (tp / total, fp / total, fn / total) if total else (0.0, 0.0, 0.0)


def _precision(tp: float, fp: float, fn: float) -> float:
    return 1.0 if fp == fn == 0 else 0.0 if tp == fp == 0 else tp / (tp + fp)


def _recall(tp: float, fp: float, fn: float) -> float:
    return 1.0 if fp == fn == 0 else 0.0 if tp == fn == 0 else tp / (tp + fn)


def score(counts: list[tuple[float, float, float]]) -> dict[str, float]:
    """F1, precision and recall over pages, as the article-extraction-benchmark computes them."""
    precisions = [_precision(*c) for c in counts if c[0] + c[1] > 0]
    recalls = [_recall(*c) for c in counts if c[0] + c[2] > 0]
    precision = sum(precisions) / len(precisions) if precisions else 0.0
    recall = sum(recalls) / len(recalls) if recalls else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"f1": f1, "precision": precision, "recall": recall}
