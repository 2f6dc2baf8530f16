"""Benchmark decontamination, offline: a registry of benchmark file formats and a word n-gram index of their items.

A benchmark is a local file (jsonl, jsonl.gz, json, csv, parquet, or a folder of them) plus the fields whose
text a model must not see in training: HumanEval's prompt and canonical solution, GSM8K's question and answer, and
so on (`FORMATS`; a recipe can name its own fields). Loading from the Hugging Face hub through `datasets` is a
second path, for a machine that has it and is online. An item's text is normalized like the documents (lowercase,
punctuation and symbols dropped, whitespace collapsed) and indexed as hashes of its word n-grams (13 by default,
GPT-3's and datatrove's choice); an item shorter than n words is indexed whole if it has at least `min_words`.

A multiple-choice item (HellaSwag, MMLU, ARC) is indexed as one candidate per choice, its context followed by that
ending, because a page that leaks it holds the context and the correct ending, not every ending in a row: a
context under n words is then still found through the candidate with its ending. The same layouts name the right
answer, so `load_choice_items` also serves `curate ablate`, which scores such benchmarks by log-likelihood.
HumanEval and GSM8K ship in the package (filters/assets/benchmarks/, MIT), so the default recipe decontaminates
against them with no file given.
"""

import csv
import gzip
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, model_validator

from filters.normalization import normalized_bytes
from filters.packaged import asset, cached, file_digest


class BenchmarkFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fields: list[list[str]]  # each inner list: alternative paths (dotted, through lists) of one field; first found wins
    choices: list[list[str]] | None = None  # the same for the answer choices; a list value is one choice per element
    id_field: str | None = None  # default: file name and row
    csv_columns: list[str] | None = None  # names for a headerless CSV (MMLU's original layout)
    answer: list[str] | None = None  # the right choice: its index, its letter (A = 0) or its label in choice_labels
    choice_labels: list[str] | None = None  # per choice its label (ARC: A-D or 1-4), what `answer` names


FORMATS: dict[str, BenchmarkFormat] = {
    "humaneval": BenchmarkFormat(fields=[["prompt"], ["canonical_solution"]], id_field="task_id"),
    "mbpp": BenchmarkFormat(fields=[["text", "prompt"], ["code"]], id_field="task_id"),
    "gsm8k": BenchmarkFormat(fields=[["question"], ["answer"]]),
    "mmlu": BenchmarkFormat(
        fields=[["question"]], choices=[["choices", "choice0"], ["choice1"], ["choice2"], ["choice3"]],
        csv_columns=["question", "choice0", "choice1", "choice2", "choice3", "answer"], answer=["answer"],
    ),
    "hellaswag": BenchmarkFormat(fields=[["ctx", "ctx_a"]], choices=[["endings"]], id_field="ind", answer=["label"]),
    # llm-foundry's and OLMES' multiple-choice jsonl (ARC, PIQA, OpenBookQA, COPA, SIQA, CommonsenseQA, HellaSwag)
    "mc": BenchmarkFormat(fields=[["query"]], choices=[["choices"]], answer=["gold"]),
    "arc": BenchmarkFormat(fields=[["question.stem", "question"]], choices=[["question.choices.text", "choices.text"]], id_field="id",
                           answer=["answerKey"], choice_labels=["question.choices.label", "choices.label"]),
}
SHIPPED = {  # format -> the file in the package, used when a benchmark gives neither path nor hf
    "humaneval": ("humaneval", "HumanEval.jsonl.gz"),
    "gsm8k": ("gsm8k", "test.jsonl"),
}


class BenchmarkSpec(BaseModel):
    """One benchmark: a built-in `format` or your own `fields`, from a local `path` or (second path) the HF hub."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[\w.-]+$")
    format: str | None = Field(None, description=f"one of {sorted(FORMATS)}; or give fields")
    fields: list[list[str]] | None = None
    id_field: str | None = None
    path: str | None = Field(None, description=f"a file or folder: jsonl, jsonl.gz, json, csv, parquet; none for the "
                                              f"copy shipped in the package ({', '.join(SHIPPED)})")  # fmt: skip
    hf: str | None = Field(None, description="a Hugging Face dataset name, loaded with `datasets` instead of path")
    hf_config: str | None = None
    hf_split: str = "test"
    choices: list[list[str]] | None = None
    answer: list[str] | None = None

    @model_validator(mode="after")
    def one_source_and_known_format(self) -> "BenchmarkSpec":
        if self.format is None and self.fields is None:
            raise ValueError(f"give a format ({', '.join(sorted(FORMATS))}) or fields")
        if self.format is not None and self.format not in FORMATS:
            raise ValueError(f"unknown format {self.format!r}; known: {sorted(FORMATS)}")
        if self.path is not None and self.hf is not None:
            raise ValueError("give path or hf, not both")
        if self.path is None and self.hf is None:
            if self.format not in SHIPPED:
                raise ValueError(f"give path or hf (only {', '.join(SHIPPED)} ship in the package)")
            self.path = str(asset("benchmarks", *SHIPPED[self.format]))
        if self.path and "://" not in self.path and not Path(self.path).exists():
            raise ValueError(f"benchmark file not found: {self.path}")
        return self

    def layout(self) -> BenchmarkFormat:
        base = FORMATS[self.format] if self.format else BenchmarkFormat(fields=self.fields)
        overrides = (("fields", self.fields), ("choices", self.choices), ("id_field", self.id_field), ("answer", self.answer))
        return base.model_copy(update={k: v for k, v in overrides if v})

    def local_files(self) -> list[Path] | None:
        """The local files the items come from (what a cached index is keyed by); None when not all local."""
        if self.hf or "://" in self.path:
            return None
        root = Path(self.path)
        return sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]


def _value(record, path: str):
    current = record
    for part in path.split("."):
        if isinstance(current, dict):
            current = current.get(part)
        elif isinstance(current, list):
            current = [item.get(part) for item in current if isinstance(item, dict)]
        else:
            return None
    return current


def _text(value) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(_text(item) for item in value)
    if hasattr(value, "tolist"):  # numpy arrays from Parquet list columns
        return _text(value.tolist())
    return "" if value is None else str(value)


def _records(path: str, layout: BenchmarkFormat):
    """(file, row, record) for every record of a file or of every file in a folder."""
    fs, root = fsspec.core.url_to_fs(path)
    if fs.isdir(root):
        files = sorted(f for f in fs.find(root) if f.endswith((".jsonl", ".jsonl.gz", ".json", ".csv", ".parquet")))
    elif fs.exists(root):
        files = [root]
    else:
        raise FileNotFoundError(f"benchmark file not found: {path}")
    for file in files:
        with fs.open(file, "rb") as handle:
            data = handle.read()
        if file.endswith(".gz"):
            data = gzip.decompress(data)
        name = file.rsplit("/", 1)[-1]
        if file.endswith(".parquet"):
            rows = pq.read_table(pa.BufferReader(data)).to_pylist()
        elif file.endswith(".csv"):
            text = data.decode("utf-8")
            header = next(csv.reader(io.StringIO(text)), [])
            has_header = any(alternatives[0] in header for alternatives in layout.fields)
            reader = csv.DictReader(io.StringIO(text), fieldnames=None if has_header else layout.csv_columns)
            rows = list(reader)
        elif file.endswith(".json"):
            rows = json.loads(data)
        else:
            rows = []
            for number, line in enumerate(data.decode("utf-8").splitlines(), 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as error:
                        raise ValueError(f"{file}: line {number} is not JSON: {error}") from None
        for row, record in enumerate(rows):
            yield name, row, record


def _found(record, alternatives: list[str]):
    return next((_value(record, path) for path in alternatives if _value(record, path) is not None), None)


def _spec_records(spec: BenchmarkSpec, layout: BenchmarkFormat):
    if not spec.hf:
        return _records(spec.path, layout)
    try:
        import datasets
    except ImportError:
        raise RuntimeError(f"benchmark {spec.name}: hf needs `pip install datasets` (or give a local path)") from None
    return ((spec.hf, row, record) for row, record in enumerate(datasets.load_dataset(spec.hf, spec.hf_config, split=spec.hf_split)))


def _context_and_choices(spec: BenchmarkSpec, layout: BenchmarkFormat, name: str, row: int, record) -> tuple[str, list[str]]:
    parts = [_text(value) for value in (_found(record, alternatives) for alternatives in layout.fields) if value is not None]
    if not parts:
        raise ValueError(f"benchmark {spec.name}: {name} row {row} has none of the fields {layout.fields}")
    choices = []
    for alternatives in layout.choices or []:
        value = _found(record, alternatives)
        value = value.tolist() if hasattr(value, "tolist") else value
        choices += [_text(v) for v in value] if isinstance(value, (list, tuple)) else [] if value is None else [_text(value)]
    return "\n".join(parts), choices


def _item_id(layout: BenchmarkFormat, name: str, row: int, record) -> str:
    return _text(_value(record, layout.id_field)) if layout.id_field else f"{name}:{row}"


def load_items(spec: BenchmarkSpec) -> list[tuple[str, list[str]]]:
    """(item id, candidate texts) of every item of a benchmark: one candidate, or one per choice (context + that
    choice) for a multiple-choice layout. An item with none of the fields is an error naming it."""
    layout = spec.layout()
    items = []
    for name, row, record in _spec_records(spec, layout):
        context, choices = _context_and_choices(spec, layout, name, row, record)
        items.append((_item_id(layout, name, row, record), [f"{context}\n{choice}" for choice in choices] or [context]))
    return items


def _answer_index(value, labels: list[str] | None) -> int | None:
    """An answer as an index: its position in the choice labels, a number (0-based), or a letter (A = 0)."""
    value = value.tolist() if hasattr(value, "tolist") else value
    text = _text(value).strip()
    if labels and text in labels:
        return labels.index(text)
    if text.lstrip("-").isdigit():
        return int(text)
    return ord(text.upper()) - ord("A") if len(text) == 1 and text.isalpha() else None


@dataclass
class ChoiceItem:
    id: str
    context: str
    choices: list[str]
    answer: int  # index into choices


def load_choice_items(spec: BenchmarkSpec) -> list[ChoiceItem]:
    """Every item of a multiple-choice benchmark as context, choices and the index of the right one (what
    `curate ablate` scores by log-likelihood); an answer that names no choice is an error naming the item."""
    layout = spec.layout()
    if not layout.choices or not layout.answer:
        raise ValueError(f"benchmark {spec.name}: not multiple-choice (its layout needs choices and answer fields)")
    items = []
    for name, row, record in _spec_records(spec, layout):
        context, choices = _context_and_choices(spec, layout, name, row, record)
        labels = _found(record, layout.choice_labels) if layout.choice_labels else None
        labels = [_text(label) for label in (labels.tolist() if hasattr(labels, "tolist") else labels)] if labels else None
        raw = _found(record, layout.answer)
        answer = None if raw is None else _answer_index(raw, labels)
        if answer is None or not 0 <= answer < len(choices):
            raise ValueError(f"benchmark {spec.name}: {name} row {row}: answer {_text(raw)} names none of its {len(choices)} choices")
        items.append(ChoiceItem(_item_id(layout, name, row, record), context, choices, answer))
    return items


def bitmap_of(hashes: np.ndarray) -> np.ndarray:
    """A bit per hash prefix, 64 bits or more per indexed hash (at most 2^30 bits): most n-grams miss it."""
    bits = int(min(30, max(16, np.ceil(np.log2(max(1, len(hashes)) * 64)))))
    bitmap = np.zeros((1 << bits) // 64, dtype=np.uint64)
    prefix = hashes >> np.uint64(64 - bits)
    np.bitwise_or.at(bitmap, prefix >> np.uint64(6), np.uint64(1) << (prefix & np.uint64(63)))
    return bitmap


@dataclass
class Matches:
    doc: np.ndarray  # int64: document of the batch
    item: np.ndarray  # int64: into NgramIndex.items
    start: np.ndarray  # int64: first matching word
    length: np.ndarray  # int64: words matched (n, or a short item's length)


@dataclass
class NgramIndex:
    n: int
    items: pa.Table  # benchmark, item_id
    keys: dict[int, tuple[np.ndarray, np.ndarray]]  # n-gram length -> (sorted hashes, item of each)
    stats: dict = field(default_factory=dict)  # per benchmark: items, indexed, too_short, ngrams
    bitmaps: dict[int, np.ndarray] = field(default_factory=dict)  # per length, built on first lookup

    @classmethod
    def build(cls, specs: list[BenchmarkSpec], n: int = 13, min_words: int = 8) -> "NgramIndex":
        from filters import benchmark_index_kernels

        names, ids, texts, owners, stats = [], [], [], [], {}
        for spec in specs:
            loaded = load_items(spec)
            for item_id, candidates in loaded:
                owners += [len(ids)] * len(candidates)
                texts += candidates
                names.append(spec.name)
                ids.append(item_id)
            stats[spec.name] = {"items": len(loaded), "too_short": 0, "ngrams": 0}
        owners = np.array(owners, dtype=np.int64)
        buffer, offsets = normalized_bytes(texts, "words")
        spaces = np.r_[0, np.cumsum(buffer == 32)]
        words = np.where(np.diff(offsets) > 0, spaces[offsets[1:]] - spaces[offsets[:-1]] + 1, 0)
        keys, per_item = {}, np.zeros(len(ids), dtype=np.int64)
        for length in sorted({n} | {int(k) for k in np.unique(words) if min_words <= k < n}):
            hashes, candidates, _ = benchmark_index_kernels.ngram_hashes(buffer, offsets, length, np.empty(0, np.uint64))
            if length < n:  # a short candidate is indexed whole: only its own full-length run counts
                whole = words[candidates] == length
                hashes, candidates = hashes[whole], candidates[whole]
            docs = owners[candidates]  # candidates of one item share their context's n-grams: keep each once
            order = np.lexsort((docs, hashes))
            hashes, docs = hashes[order], docs[order]
            first = np.r_[True, (hashes[1:] != hashes[:-1]) | (docs[1:] != docs[:-1])] if len(hashes) else np.empty(0, bool)
            keys[length] = (hashes[first], docs[first])
            per_item += np.bincount(docs[first], minlength=len(ids))
        longest = np.zeros(len(ids), dtype=np.int64)
        np.maximum.at(longest, owners, words)
        names_array = np.array(names, dtype=object)
        for name in stats:
            mine = names_array == name
            stats[name]["ngrams"] = int(per_item[mine].sum())
            stats[name]["too_short"] = int((longest[mine] < min(n, min_words)).sum())
        items = pa.table({"benchmark": pa.array(names, pa.string()), "item_id": pa.array(ids, pa.string())})
        return cls(n, items, keys, stats)

    @classmethod
    def cached(cls, specs: list[BenchmarkSpec], n: int = 13, min_words: int = 8) -> "NgramIndex":
        """`build`, once per machine for the same benchmark files and settings (filters.packaged's cache): every
        worker of a run, and every later run, loads it instead of rebuilding it. Benchmarks from the hub or a
        remote path are built each time."""
        files = [spec.local_files() for spec in specs]
        if any(f is None for f in files):
            return cls.build(specs, n, min_words)
        settings = json.dumps([[spec.model_dump() for spec in specs], n, min_words], sort_keys=True)
        key = file_digest(*(path for group in files for path in group), extra=settings)
        return cls.load(str(cached("decontam_index", key, lambda folder: cls.build(specs, n, min_words).save(str(folder)))))

    def lookup(self, buffer: np.ndarray, offsets: np.ndarray) -> Matches:
        """Every n-gram (and whole short item) of the normalized documents that is in the index."""
        from filters import benchmark_index_kernels

        found = []
        for length, (keys, items) in self.keys.items():
            if length not in self.bitmaps:
                self.bitmaps[length] = bitmap_of(keys)
            hashes, docs, starts = benchmark_index_kernels.ngram_hashes(buffer, offsets, length, self.bitmaps[length])
            left = np.searchsorted(keys, hashes, side="left")
            right = np.searchsorted(keys, hashes, side="right")
            counts = right - left
            hit = np.flatnonzero(counts)
            positions = np.concatenate([np.arange(l, r) for l, r in zip(left[hit], right[hit])]) if len(hit) else np.empty(0, np.int64)
            rows = np.repeat(hit, counts[hit])
            found.append(Matches(docs[rows], items[positions], starts[rows], np.full(len(rows), length)))
        if not found:
            return Matches(*(np.empty(0, np.int64) for _ in range(4)))
        return Matches(*(np.concatenate([getattr(m, name) for m in found]) for name in ("doc", "item", "start", "length")))

    def save(self, folder: str) -> None:
        """index.json goes last and marks the folder complete: it is removed first, so a save killed halfway leaves
        no index that `load` would take for whole."""
        fs, root = fsspec.core.url_to_fs(folder)
        fs.makedirs(root, exist_ok=True)
        if fs.exists(f"{root}/index.json"):
            fs.rm(f"{root}/index.json")
        pq.write_table(self.items, f"{root}/items.parquet", filesystem=fs)
        for length, (keys, items) in self.keys.items():
            ngrams = pa.table({"hash": pa.array(keys, pa.uint64()), "item": items})
            pq.write_table(ngrams, f"{root}/ngrams-{length}.parquet", filesystem=fs)
        with fs.open(f"{root}/index.json", "w") as handle:
            json.dump({"n": self.n, "lengths": sorted(self.keys), "benchmarks": self.stats}, handle)

    @classmethod
    def load(cls, folder: str) -> "NgramIndex":
        fs, root = fsspec.core.url_to_fs(folder)
        if not fs.exists(f"{root}/index.json"):
            raise FileNotFoundError(f"{folder} is not a decontamination index (no index.json): build one with `curate decontam index`")
        with fs.open(f"{root}/index.json") as handle:
            meta = json.load(handle)
        keys = {}
        for length in meta["lengths"]:
            table = pq.read_table(f"{root}/ngrams-{length}.parquet", filesystem=fs)
            keys[length] = (table["hash"].to_numpy(), table["item"].to_numpy())
        return cls(meta["n"], pq.read_table(f"{root}/items.parquet", filesystem=fs), keys, meta["benchmarks"])

