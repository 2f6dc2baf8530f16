"""The `resiliparse_blocks` extraction backend: resiliparse's main-content pass (C, ~2-4 ms a page), then a small
learned classifier that drops the boilerplate blocks it keeps (navigation, share bars, bylines, related links).

Resiliparse writes its main content as minimal HTML (paragraphs, headings, list items, pre, links); each block gets
features from its own text (words, link density, tag, closing punctuation, capitals, digits) and its neighbours' and
place in the page (Boilerpipe's and jusText's shallow text features), and a two-layer network scores it. Class and id
names (trafilatura's discard vocabulary) were tried as features too: about +0.005 F1 in cross-validation on the
training split, at 3-10 ms a page to find them (more than resiliparse's whole pass), so they are left out. The
network is trained by `curate extract train-blocks` on the development sets' training split and ships as
`assets/extract_blocks/model.json` (a few kB of weights, read with numpy).
"""

import html as html_entities
import json
import math
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

MODEL_FILE = Path(__file__).with_name("assets") / "extract_blocks" / "model.json"
RESILIPARSE_OPTIONS = {"main_content": True, "comments": False, "post_meta": False, "list_bullets": False,
                       "alt_texts": False, "links": True, "preserve_formatting": "minimal_html"}  # fmt: skip
_MARKUP = re.compile(r"<(/?)([a-zA-Z0-9]+)[^>]*>|([^<]+)")
BLOCK_TAGS = {"p": "p", "li": "li", "pre": "pre", **{f"h{i}": "h" for i in range(1, 7)}}
TAG_KINDS = ("p", "h", "li", "pre", "text")
_WORD = re.compile(r"\w+")
_DIGIT = re.compile(r"\d")
_SPACES = re.compile(r"[ \t]+")
_SENTENCE_MARK = re.compile(r"[.!?。！？]")
CAPITALS_OF = 64  # words whose capitals are counted: the first ones of a block say enough
_SENTENCE_END = re.compile(r"[.!?。！？:;\"”»)]\s*$")


@dataclass
class Block:
    tag: str
    parts: list[str] = field(default_factory=list)
    link_chars: int = 0

    @cached_property
    def text(self) -> str:
        return _SPACES.sub(" ", html_entities.unescape("".join(self.parts))).strip()

    @cached_property
    def words(self) -> int:
        return len(_WORD.findall(self.text))


def minimal_html_blocks(markup: str) -> list[Block]:
    """Resiliparse's minimal HTML cut into blocks, each with the characters of it inside links."""
    blocks: list[Block] = []
    current: Block | None = None
    in_link = False
    for closing, tag, text in _MARKUP.findall(markup):
        tag = tag.lower()
        if text:
            if current is None:
                if not text.strip():
                    continue
                current = Block("text")
                blocks.append(current)
            current.parts.append(text)
            if in_link:
                current.link_chars += len(text.strip())
        elif tag == "a":
            in_link = not closing
        elif tag == "br":
            if current is not None:
                current.parts.append("\n")
        elif tag in BLOCK_TAGS:
            current = None if closing else Block(BLOCK_TAGS[tag])
            if current is not None:
                blocks.append(current)
        elif tag in ("ul", "ol"):
            current = None
    return [block for block in blocks if block.text]


FEATURES = ("log_words", "link_density", *(f"tag_{kind}" for kind in TAG_KINDS), "ends_sentence", "capitalised",
            "digits", "words_per_sentence", "position", "chars_before", "prev_log_words", "next_log_words",
            "prev_link_density", "next_link_density", "window_log_words", "from_longest", "page_log_words",
            "page_log_blocks", "share_of_page")  # fmt: skip


def block_features(blocks: list[Block]) -> np.ndarray:
    """One row of FEATURES per block."""
    count = len(blocks)
    texts = [block.text for block in blocks]
    words = [block.words for block in blocks]
    link = [min(1.0, block.link_chars / max(1, len(text))) for block, text in zip(blocks, texts)]
    log_words = [math.log1p(w) for w in words]
    total_words = sum(words) or 1
    total_chars = sum(map(len, texts)) or 1
    longest = max(range(count), key=words.__getitem__) if count else 0
    rows, chars_before = [], 0
    for i, (block, text) in enumerate(zip(blocks, texts)):
        tokens = text.split(maxsplit=CAPITALS_OF)[:CAPITALS_OF]
        window = log_words[max(0, i - 2) : i + 3]
        sentences = max(1, len(_SENTENCE_MARK.findall(text)))
        rows.append([
            log_words[i], link[i], *(float(block.tag == kind) for kind in TAG_KINDS),
            float(bool(_SENTENCE_END.search(text))),
            sum(t[:1].isupper() for t in tokens) / max(1, len(tokens)),
            len(_DIGIT.findall(text)) / max(1, len(text)),
            math.log1p(words[i] / sentences),
            i / max(1, count - 1), chars_before / total_chars,
            log_words[i - 1] if i else 0.0, log_words[i + 1] if i + 1 < count else 0.0,
            link[i - 1] if i else 0.0, link[i + 1] if i + 1 < count else 0.0,
            sum(window) / len(window), min(abs(i - longest), 20) / 20,
            math.log1p(total_words), math.log1p(count), words[i] / total_words,
        ])  # fmt: skip
        chars_before += len(text)
    return np.asarray(rows, dtype=np.float32).reshape(count, len(FEATURES))


@dataclass(frozen=True)
class BlockModel:
    """Standardised features -> tanh hidden layer -> the probability that a block is main content."""

    mean: np.ndarray
    scale: np.ndarray
    hidden_weight: np.ndarray
    hidden_bias: np.ndarray
    out_weight: np.ndarray
    out_bias: float
    threshold: float
    trained_on: tuple[str, ...] = ()  # the development pages it was fitted on, by name: never scored as held-out

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        hidden = np.tanh(((features - self.mean) / self.scale) @ self.hidden_weight + self.hidden_bias)
        return 1 / (1 + np.exp(-(hidden @ self.out_weight + self.out_bias)))

    def to_json(self) -> dict:
        return {"features": list(FEATURES), "threshold": self.threshold, "out_bias": self.out_bias,
                **{name: getattr(self, name).tolist() for name in ("mean", "scale", "hidden_weight", "hidden_bias",
                                                                    "out_weight")}, "trained_on": list(self.trained_on)}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict, source: str) -> "BlockModel":
        if data.get("features") != list(FEATURES):
            raise ValueError(f"{source}: made for other block features than these; train it again with "
                             "`curate extract train-blocks`")  # fmt: skip
        arrays = {name: np.asarray(data[name], dtype=np.float32) for name in ("mean", "scale", "hidden_weight",
                                                                               "hidden_bias", "out_weight")}  # fmt: skip
        return cls(**arrays, out_bias=float(data["out_bias"]), threshold=float(data["threshold"]),
                   trained_on=tuple(data.get("trained_on", ())))  # fmt: skip


@lru_cache(maxsize=4)
def load_block_model(path: str = str(MODEL_FILE)) -> BlockModel:
    return BlockModel.from_json(json.loads(Path(path).read_text()), path)


def main_content_blocks(html: str) -> list[Block]:
    from resiliparse.extract.html2text import extract_plain_text

    return minimal_html_blocks(extract_plain_text(html, **RESILIPARSE_OPTIONS))


UNSURE = (0.15, 0.85)  # block probabilities the model is unsure of


def unsure_share(blocks: list[Block], probabilities: np.ndarray) -> float:
    """The share of a page's words in blocks whose probability is in UNSURE: 1 for a page with no words."""
    words = np.array([block.words for block in blocks], dtype=np.float64)
    unsure = (probabilities > UNSURE[0]) & (probabilities < UNSURE[1])
    return float(words[unsure].sum() / words.sum()) if words.sum() else 1.0


def extract_with_blocks(html: str, model: BlockModel | None = None, fallback_unsure: float | None = None) -> tuple[str, bool]:
    """The page's main text (resiliparse's main-content blocks the model keeps, one per line), and whether its
    unsure share reaches `fallback_unsure` (never when None), so the page should go to another extractor."""
    blocks = main_content_blocks(html)
    if not blocks:
        return "", fallback_unsure is not None
    model = model or load_block_model()
    probabilities = model.probabilities(block_features(blocks))
    text = "\n".join(block.text for block, p in zip(blocks, probabilities) if p >= model.threshold)
    return text, fallback_unsure is not None and unsure_share(blocks, probabilities) >= fallback_unsure
