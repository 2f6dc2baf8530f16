"""Benchmark decontamination: documents sharing a word n-gram with a benchmark item are dropped, or the matching
spans (with a margin) are cut out and the rest kept.

The index comes from `curate decontam index` (`index: path`) or from the recipe's `benchmarks`, built once per
machine and benchmark content (cached by hash; about a second for GSM8K + HumanEval), so nothing is downloaded. Every hit (document id, URL, benchmark,
item id, n-grams matched, action) is a row of the stage's report, `OUT/decontamination.parquet`.
"""

import re
from collections import Counter, defaultdict
from typing import Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, model_validator

from filters.base import Annotation, Stage, StageParams
from filters.benchmark_index import BenchmarkSpec, NgramIndex
from filters.normalization import normalize_batch, normalized_bytes

_TOKENS = re.compile(r"\S+")


class DecontamParams(StageParams):
    benchmarks: list[BenchmarkSpec] = Field(default_factory=list, description="benchmarks to index in setup()")
    index: str | None = Field(None, description="a folder written by `curate decontam index` instead of benchmarks")
    ngram: int = Field(13, ge=3, description="words per n-gram (when building from benchmarks)")
    min_words: int = Field(8, ge=1, description="shorter items are not indexed (too common to mean contamination)")
    min_matches: int = Field(1, ge=1, description="n-grams a document must share with one item to count as a hit")
    policy: Literal["drop", "cut"] = "drop"
    margin: int = Field(50, ge=0, description="words cut on each side of a match (policy cut)")
    min_remaining_words: int = Field(50, ge=0, description="policy cut: drop the document if fewer words remain")

    @model_validator(mode="after")
    def one_source(self) -> "DecontamParams":
        if bool(self.benchmarks) == bool(self.index):
            raise ValueError("give benchmarks (built in setup) or index (from `curate decontam index`), not both")
        return self


class Decontaminator(Stage):
    name = "decontam"
    Params = DecontamParams
    adds = {"text": pa.string(), "decontam_items": pa.list_(pa.string())}
    report_name = "decontamination"
    report_schema = pa.schema([
        ("id", pa.string()), ("url", pa.string()), ("benchmark", pa.string()), ("item_id", pa.string()),
        ("ngrams", pa.int64()), ("action", pa.string()),
    ])  # fmt: skip

    def loaded_files(self) -> list[str]:
        if self.params.index:
            return [self.params.index]
        return [benchmark.path for benchmark in self.params.benchmarks if benchmark.path]

    def setup(self) -> None:
        params = self.params
        if params.index:
            self.index = NgramIndex.load(params.index)
        else:
            self.index = NgramIndex.cached(params.benchmarks, params.ngram, params.min_words)

    def annotate(self, table: pa.Table) -> Annotation:
        texts = table["text"].to_pylist()
        buffer, offsets = normalized_bytes(texts, "words")
        matches = self.index.lookup(buffer, offsets)
        benchmarks = self.index.items["benchmark"].to_pylist()
        item_ids = self.index.items["item_id"].to_pylist()
        per_doc: dict[int, Counter] = defaultdict(Counter)
        spans: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for doc, item, start, length in zip(*(a.tolist() for a in (matches.doc, matches.item, matches.start, matches.length))):
            per_doc[doc][item] += 1
            spans[doc].append((start, start + length))
        reasons: list[str | None] = [None] * len(texts)
        hits_column: list[list[str]] = [[] for _ in texts]
        report, documents, pairs, ngrams = [], Counter(), Counter(), Counter()
        ids = table["id"].to_pylist()
        urls = table["url"].to_pylist() if "url" in table.column_names else [None] * len(texts)
        for doc, counts in per_doc.items():
            hits = {item: n for item, n in counts.items() if n >= self.params.min_matches}
            if not hits:
                continue
            first = min(hits, key=lambda item: (-hits[item], item))
            action = "drop"
            if self.params.policy == "cut":
                remaining = self._cut(texts[doc], spans[doc])
                if remaining is not None:
                    texts[doc], action = remaining, "cut"
            if action == "drop":
                reasons[doc] = f"decontam/{benchmarks[first]}"
            hits_column[doc] = [f"{benchmarks[item]}/{item_ids[item]}" for item in sorted(hits)]
            for bench in {benchmarks[item] for item in hits}:
                documents[bench] += 1
            for item, n in hits.items():
                pairs[benchmarks[item]] += 1
                ngrams[benchmarks[item]] += n
                report.append({"id": ids[doc], "url": urls[doc], "benchmark": benchmarks[item], "item_id": item_ids[item], "ngrams": n, "action": action})
        stats = {  # additive over shards; distinct items per benchmark are in the report
            "decontam_documents": dict(documents), "decontam_hits": dict(pairs), "decontam_ngrams": dict(ngrams), "report": report,
        }  # fmt: skip
        return Annotation(reasons, {"text": texts, "decontam_items": hits_column}, stats)

    def _cut(self, text: str, spans: list[tuple[int, int]]) -> str | None:
        """The text without the matched words and `margin` words around them; None when too little is left or the
        words cannot be mapped back (then the document is dropped)."""
        tokens = [(m.start(), m.end()) for m in _TOKENS.finditer(text)]
        normalized = normalize_batch([text[a:b] for a, b in tokens], "words")
        words = [span for span, word in zip(tokens, normalized) if word and " " not in word]
        if len(words) != sum(len(word.split(" ")) for word in normalized if word):
            return None
        cut = np.zeros(len(words) + 1, dtype=np.int64)
        for start, end in spans:
            cut[max(0, start - self.params.margin)] += 1
            cut[min(len(words), end + self.params.margin)] -= 1
        keep = np.cumsum(cut)[: len(words)] == 0
        if keep.sum() < self.params.min_remaining_words:
            return None
        pieces, run_start = [], None
        for index, kept in enumerate(np.r_[keep, False]):
            if kept and run_start is None:
                run_start = index
            elif not kept and run_start is not None:
                pieces.append(text[words[run_start][0] : words[index - 1][1]])
                run_start = None
        return "\n".join(pieces)
