"""Curated text -> token shards (`id`, `source`, `tokens: list<int32>`, `n_tokens`, `split`, and the curation columns
a mixture can select by: `bucket`, `quality_score`, `language`, `repository`, `repo_has_tests`) with the tokenizer.

`split` holds out a validation slice by a hash of each document's id (`shard_contract.held_out`): the same documents
whatever the run, never trained on, scored by `train` every `eval_every` steps.

`curate tokenize` runs one Ray task per curated part. A task writes RUN/tokens/part-NNNNN.parquet under the part's
own name, then its stats (with the tokenizer's sha256 and the input part's size and version) to
RUN/tokens/parts/part-NNNNN.json: a rerun skips a part whose two files are there and match, and redoes anything else,
so a killed run resumes without losing or duplicating a document. stats.json, written last from the parts' stats,
marks a run whose tokens are all written.

With no tokenizer given, a byte-level BPE is trained with HF `tokenizers` on a bounded, seeded sample of the curated
text (`sample_plan`), recorded beside it in tokenizer_sample.json; a rerun with the same sample reuses it.
"""

import hashlib
import json
import os
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from curation.io import read_json, remove_temporaries, write_json_atomic, write_parquet_atomic, write_text_atomic
from curation.pyarrow_without_pandas import spare_workers_pandas
from curation.run_folder import LOCK_FILE, final_stage_dir, part_name
from shard_contract import EOS_TOKEN as EOS
from shard_contract import folder_lock
from shard_contract import FILE_SEP_TOKEN, PART_STATS_DIR, REPO_NAME_TOKEN, SHARDS_KEY, SPLIT_COLUMN, STATS_FILE, TOKEN_SCHEMA, TOKENIZER_FILE, TRAIN, VALIDATION, file_digest, held_out

METADATA_COLUMNS = ("bucket", "quality_score", "language", "repository", "repo_has_tests")
TOKENS_DIR = "tokens"
SAMPLE_FILE = "tokenizer_sample.json"
VALIDATION_FRACTION = 0.01
SAMPLE_BYTES = 64 * 2**20
SAMPLE_SEED = 0
SAMPLE_POINTS = 256  # parts read at most for the tokenizer's sample, however large the corpus
TRAINER_VERSION = 1  # in the sample plan: bump when train_tokenizer's settings change, so a rerun retrains


@dataclass(frozen=True)
class Part:
    """A curated part and what identifies its content: a part rewritten by a later `curate run` is another input."""

    run: str
    path: str
    bytes: int
    version: str  # the object store's ETag, else the file's modification time; "" when unknown: never skipped

    @property
    def name(self) -> str:
        return Path(self.path).name

    def identity(self) -> dict:
        return {"name": self.name, "bytes": self.bytes, "version": self.version}


def curated_parts(run_dir: str) -> list[str]:
    """The parts of the last stage of the recipe a `curate run` folder was last run with."""
    return [part.path for part in listed_parts(run_dir)]


def listed_parts(run_dir: str, verify: bool = True) -> list[Part]:
    """`curated_parts` with their sizes and versions, from one listing; `verify`: each part's sha256 checked too."""
    fs, root = fsspec.core.url_to_fs(run_dir, use_listings_cache=False)
    manifest = f"{root.rstrip('/')}/manifest.json"
    if not fs.exists(manifest):
        raise FileNotFoundError(f"{run_dir} has no manifest.json: is it the output folder of `curate run`?")
    done = read_json(fs, manifest)
    last = final_stage_dir(done, run_dir)
    recorded = done["stages"].get(last, {}).get("shards", {})
    shards = len(done.get("inputs", []))
    listing = fs.glob(f"{root.rstrip('/')}/{last}/part-*.parquet", detail=True)
    if not listing or len(recorded) < shards:
        raise FileNotFoundError(f"{run_dir}/{last}: {len(recorded)} of {shards} shards finished: rerun `curate run` to finish it")
    found = {Path(path).name: (path, info) for path, info in listing.items()}
    missing = sorted(name for name in map(part_name, map(int, recorded)) if name not in found)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise FileNotFoundError(f"{run_dir}/{last}: {len(missing)} of the {len(recorded)} parts its manifest.json lists "
                                f"finished are missing ({shown}): rerun `curate run` with the same arguments to write them again")  # fmt: skip
    listed = {part_name(int(shard)): stats.get("part_sha256") for shard, stats in recorded.items()}  # the run's parts
    if verify:
        _check_intact(fs, [(found[name][0], sha256) for name, sha256 in sorted(listed.items()) if sha256])
    return [Part(run_dir, found[name][0], int(found[name][1]["size"]), _version(found[name][1])) for name in sorted(listed)]


def _check_intact(fs, parts: list[tuple[str, str]]) -> None:
    """Each part has the sha256 `curate run` recorded when it wrote it (runs written before it recorded one are not
    checked): a part changed in place would otherwise be tokenized as if it were the run's."""
    def read(path: str) -> str:
        with fs.open(path, "rb") as handle:
            return file_digest(handle)[1]

    with ThreadPoolExecutor(max_workers=8) as pool:
        for (path, recorded), sha256 in zip(parts, pool.map(read, [path for path, _ in parts])):
            if sha256 != recorded:
                raise ValueError(f"{path} changed after `curate run` wrote it (sha256 {sha256[:12]}; its manifest.json "
                                 f"records {recorded[:12]}): delete it and rerun `curate run` with the same arguments")  # fmt: skip


def _version(info: dict) -> str:
    keys = {str(key).lower(): value for key, value in info.items()}
    return str(next((keys[key] for key in ("etag", "mtime", "lastmodified", "last_modified", "updated") if keys.get(key)), ""))


def _normalised(run_dir: str) -> str:
    """A run's path as the sample plan records it: `runs/web/` and `runs/web` are one run."""
    return run_dir.rstrip("/") if "://" in run_dir else os.path.normpath(run_dir)


def train_tokenizer(texts, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS, REPO_NAME_TOKEN, FILE_SEP_TOKEN], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def _unreadable(path: str, error: Exception) -> ValueError:
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return ValueError(f"{path}: its text could not be read for the tokenizer's sample: {reason}")


def text_bytes(part: Part) -> int:
    """The uncompressed size of a part's `text` column, from its Parquet footer alone: what the sample counts, where
    the file's size would count compressed bytes of every column."""
    fs, _ = fsspec.core.url_to_fs(part.run)
    try:
        with fs.open(part.path, "rb") as handle:
            metadata = pq.ParquetFile(handle).metadata
    except (OSError, pa.ArrowException) as error:
        raise _unreadable(part.path, error) from None
    chunks = (metadata.row_group(i).column(j) for i in range(metadata.num_row_groups) for j in range(metadata.num_columns))
    return sum(chunk.total_uncompressed_size for chunk in chunks if chunk.path_in_schema == "text")


def text_sizes(parts: list[Part]) -> dict[Part, int]:
    """`text_bytes` of every part, their footers read on several threads (remote reads wait on the network)."""
    with ThreadPoolExecutor(max_workers=16) as pool:
        return dict(zip(parts, pool.map(text_bytes, parts)))


def sample_plan(parts: list[Part], sizes: dict[Part, int], sample_bytes: int, seed: int, vocab_size: int) -> dict:
    """Which parts the tokenizer's sample reads, and how many text bytes from each (`sizes`: each part's text bytes).
    A corpus whose text adds up to `sample_bytes` or less is taken whole. A larger one is sampled with probability
    proportional to size: the parts, in a seeded order, lie end to end on a line of their text sizes, and
    `SAMPLE_POINTS` evenly spaced points (seeded start) each pick the part under them and ask it for
    sample_bytes / points bytes of seeded random documents. Every run and source so gets its share of the bytes, and
    the sample's memory and time stay bounded whatever the corpus."""
    listing = sorted([_normalised(part.run), *part.identity().values()] for part in parts)
    plan = {"trainer_version": TRAINER_VERSION, "seed": seed, "sample_bytes": sample_bytes, "vocab_size": vocab_size,
            "inputs_sha256": hashlib.sha256(json.dumps(listing).encode()).hexdigest()}  # fmt: skip
    total = sum(sizes[part] for part in parts)
    if total <= sample_bytes:
        plan["reads"] = [[part.run, part.path, None] for part in parts]
        return plan
    rng = random.Random(seed)
    order = sorted(parts, key=lambda part: (part.run, part.path))
    rng.shuffle(order)
    step, start = total / SAMPLE_POINTS, rng.random() * total / SAMPLE_POINTS
    quota, picks, edge, point = sample_bytes // SAMPLE_POINTS, Counter(), 0, start
    for index, part in enumerate(order):
        edge += sizes[part]
        while point < edge and sum(picks.values()) < SAMPLE_POINTS:
            picks[index] += 1
            point += step
    plan["reads"] = [[order[i].run, order[i].path, quota * count] for i, count in sorted(picks.items())]
    return plan


def sample_texts(plan: dict, record: dict):
    """The plan's documents (a part's in a seeded order, until its byte quota, the last one cut to fit: a tokenizer
    learns as well from a document's start); fills `record` with what was taken."""
    rng = random.Random(plan["seed"])
    per_run = record.setdefault("runs", {})
    for run_dir, path, quota in plan["reads"]:
        fs, _ = fsspec.core.url_to_fs(run_dir)
        try:
            with fs.open(path, "rb") as handle:
                texts = pq.read_table(handle, columns=["text"])["text"].to_pylist()
        except (OSError, pa.ArrowException) as error:
            raise _unreadable(path, error) from None
        if quota is not None:
            rng.shuffle(texts)
        taken = per_run.setdefault(run_dir, {"documents": 0, "bytes": 0, "parts": 0})
        taken["parts"] += 1
        used = 0
        for text in texts:
            if quota is not None and used >= quota:
                break
            data = text.encode("utf-8")
            if quota is not None and len(data) > quota - used:  # the last one's start: the quota is never overshot
                data = data[: quota - used]
                text = data.decode("utf-8", errors="ignore")
            used += len(data)
            taken["documents"] += 1
            taken["bytes"] += len(data)
            yield text
    record["documents"] = sum(run["documents"] for run in per_run.values())
    record["bytes"] = sum(run["bytes"] for run in per_run.values())


def tokenizer_sha(tokenizer) -> str:
    return hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()


def trained_or_reused(parts: list[Part], tokens_dirs: dict[str, tuple], vocab_size: int, sample_bytes: int, seed: int,
                      retrain: bool = False):  # fmt: skip
    """(tokenizer, how, sample record, runs to tokenize again): the tokenizer a run's tokens/ holds when its sample
    record matches this sample plan (a resumed run keeps its tokenizer instead of relying on retraining being
    deterministic); else the tokenizer these runs hold when the tokens of other runs were made with it too (a later
    `curate tokenize A` after a joint `curate tokenize A B C` must not leave B and C on another vocabulary), unless
    `retrain`, which names those other runs; else one trained on the sample. Nothing is written here: `prepare` deletes
    stats.json before it saves a new tokenizer."""
    plan = sample_plan(parts, text_sizes(parts), sample_bytes, seed, vocab_size)
    held = _held_tokenizers(tokens_dirs)
    for run_dir, (tokenizer, record) in held.items():
        if record.get("plan") == plan and record.get("tokenizer_sha256") == tokenizer_sha(tokenizer):
            return tokenizer, f"reused {SAMPLE_FILE} ({record['bytes']:,} bytes, {record['documents']:,} documents)", record, []
    shared = {run_dir: _sharers(tokenizer, record, tokens_dirs) for run_dir, (tokenizer, record) in held.items()}
    keep = {run_dir: sharers for run_dir, sharers in shared.items() if sharers or not held[run_dir][1]}
    if keep and not retrain:
        if len({tokenizer_sha(held[run_dir][0]) for run_dir in keep}) > 1:
            raise ValueError(f"{' and '.join(keep)} hold different tokenizers, each used by other tokens: pass "
                             "--tokenizer FILE to choose one, or --retrain-tokenizer to train a new one over these runs")  # fmt: skip
        run_dir, sharers = next(iter(keep.items()))
        tokenizer, record = held[run_dir]
        why = f"the tokens of {', '.join(sharers)} were made with it too" if sharers else "it was given with --tokenizer"
        how = (f"kept {run_dir}/{TOKENS_DIR}/{TOKENIZER_FILE} (vocabulary {tokenizer.get_vocab_size():,}): {why}; "
               "--retrain-tokenizer trains a new one over these runs only")  # fmt: skip
        return tokenizer, how, record or None, []
    record = {"plan": plan, "run_paths": sorted(_absolute(run_dir) for run_dir in tokens_dirs)}
    tokenizer, record = _trained_in_a_worker(plan, record, vocab_size)
    retokenize = sorted({run for sharers in shared.values() for run in sharers})
    return tokenizer, f"trained on {record['bytes']:,} bytes, {record['documents']:,} documents ({SAMPLE_FILE})", record, retokenize


def _trained_in_a_worker(plan: dict, record: dict, vocab_size: int):
    """(tokenizer, its sample record), trained in a Ray worker of its own: BPE's merges run in Rust without a look at
    signals (4-5 s on 4.6 MB of text here, minutes on the 64 MiB default), so trained in the driver Ctrl-C waited for
    them; the driver waits in ray.get, which Ctrl-C interrupts, and stopping Ray ends the worker. One call per worker:
    the pool of threads the training starts would outlive it in a worker that then tokenizes parts on one core."""
    import ray
    from tokenizers import Tokenizer

    train = ray.remote(num_cpus=1, max_calls=1, max_retries=0)(_train_on_worker)
    try:
        text, record = ray.get(train.remote(plan, record, vocab_size))
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, ValueError):  # an unreadable part of the sample, named in one line
            raise error.cause from None
        raise
    return Tokenizer.from_str(text), record


def _train_on_worker(plan: dict, record: dict, vocab_size: int) -> tuple[str, dict]:
    started = time.perf_counter()
    tokenizer = train_tokenizer(sample_texts(plan, record), vocab_size)
    record.update(tokenizer_sha256=tokenizer_sha(tokenizer), seconds=round(time.perf_counter() - started, 2))
    return tokenizer.to_str(), record


def _absolute(run_dir: str) -> str:
    return run_dir.rstrip("/") if "://" in run_dir else os.path.abspath(run_dir)


def _held_tokenizers(tokens_dirs: dict[str, tuple]) -> dict[str, tuple]:
    """run -> (tokenizer, sample record) for the runs whose tokens/ holds a tokenizer (record {} when it has none)."""
    from tokenizers import Tokenizer

    held = {}
    for run_dir, (fs, out) in tokens_dirs.items():
        if fs.exists(f"{out}/{TOKENIZER_FILE}"):
            with fs.open(f"{out}/{TOKENIZER_FILE}", "r") as handle:
                tokenizer = Tokenizer.from_str(handle.read())
            held[run_dir] = (tokenizer, read_json(fs, f"{out}/{SAMPLE_FILE}") if fs.exists(f"{out}/{SAMPLE_FILE}") else {})
    return held


def _sharers(tokenizer, record: dict, tokens_dirs: dict[str, tuple]) -> list[str]:
    """The runs outside this command that the tokenizer was trained with (its sample record names them) and whose
    tokens/ still holds it: replacing it would leave their tokens on another vocabulary than these runs'."""
    here = {_absolute(run_dir) for run_dir in tokens_dirs}
    named = record.get("run_paths") or [_absolute(run) for run, _, _ in record.get("plan", {}).get("reads", [])]
    text, sharers = tokenizer.to_str(), []
    for run_dir in sorted(set(named) - here):
        fs, root = fsspec.core.url_to_fs(run_dir, use_listings_cache=False)
        path = f"{root.rstrip('/')}/{TOKENS_DIR}/{TOKENIZER_FILE}"
        if fs.exists(path) and fs.cat_file(path).decode("utf-8") == text:
            sharers.append(run_dir)
    return sharers


@dataclass(frozen=True)
class PartTask:
    """One curated part to tokenize, with where the tokenizer lies (a worker loads it once per tokenizer sha)."""

    fs: object
    part: Part
    out: str  # RUN/tokens, a path on fs
    tokenizer_path: str
    tokenizer_sha256: str
    validation_fraction: float

    @property
    def token_path(self) -> str:
        return f"{self.out}/{self.part.name}"

    @property
    def stats_path(self) -> str:
        return f"{self.out}/{PART_STATS_DIR}/{Path(self.part.name).stem}.json"

    def matches(self, stats: dict) -> bool:
        """Whether a part's recorded stats were made from this input with this tokenizer and held-out fraction."""
        return (self.part.version != "" and stats.get("input") == self.part.identity() and stats.get("tokenizer_sha256") == self.tokenizer_sha256
                and stats.get("validation_fraction") == self.validation_fraction)  # fmt: skip

    def finished(self) -> dict | None:
        """The part's stats when both its files are there and match; None when it must be (re)done."""
        fs = self.fs
        if not (fs.exists(self.stats_path) and fs.exists(self.token_path)):
            return None
        try:
            stats = read_json(fs, self.stats_path)
        except (OSError, json.JSONDecodeError):
            return None
        recorded = stats.get("shard", {})
        if not self.matches(stats) or fs.size(self.token_path) != recorded.get("bytes"):
            return None
        with fs.open(self.token_path, "rb") as handle:  # a part changed in place (a flipped byte) is redone, not kept
            return stats if file_digest(handle)[1] == recorded.get("sha256") else None


_LOADED: dict[str, object] = {}  # sha256 -> tokenizer: the one a worker process last loaded


def _tokenizer(path: str, fs, sha256: str):
    """A worker loads each tokenizer once, not once per task, and holds only the latest."""
    if sha256 not in _LOADED:
        from tokenizers import Tokenizer

        with fs.open(path, "r") as handle:
            text = handle.read()
        if hashlib.sha256(text.encode("utf-8")).hexdigest() != sha256:
            raise ValueError(f"{path} changed while tokenizing: rerun `curate tokenize`")
        _LOADED.clear()
        _LOADED[sha256] = Tokenizer.from_str(text)
    return _LOADED[sha256]


def tokenize_part(task: PartTask, tokenizer=None, batch_size: int = 1024) -> dict:
    """Encode one curated part, write its token part, then its stats; returns the stats."""
    started = time.perf_counter()
    fs = task.fs
    tokenizer = tokenizer or _tokenizer(task.tokenizer_path, fs, task.tokenizer_sha256)
    with fs.open(task.part.path, "rb") as handle:  # only the columns a token part keeps: curated parts carry many more
        part = pq.ParquetFile(handle)
        table = part.read(columns=[c for c in part.schema_arrow.names if c in ("id", "source", "text", *METADATA_COLUMNS)])
    encoded = []
    texts = table["text"]
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)  # the same ids, without character offsets
    for start in range(0, table.num_rows, batch_size):
        encoded += [e.ids for e in encode(texts.slice(start, batch_size).to_pylist())]
    ids, sources = table["id"].to_pylist(), table["source"].to_pylist()
    counts = [len(e) for e in encoded]
    splits = [VALIDATION if held_out(doc_id, task.validation_fraction) else TRAIN for doc_id in ids]
    shard = pa.table({"id": ids, "source": sources, "tokens": encoded, "n_tokens": counts}, schema=TOKEN_SCHEMA)
    shard = shard.append_column(SPLIT_COLUMN, pa.array(splits, pa.string()))
    for column in METADATA_COLUMNS:
        if column in table.column_names:
            shard = shard.append_column(table.schema.field(column), table[column])
    per_source: dict[str, Counter] = {}
    for source, count, split in zip(sources, counts, splits):
        held = split == VALIDATION
        per_source.setdefault(source, Counter()).update(
            documents=1, tokens=count, validation_documents=held, validation_tokens=count if held else 0)  # fmt: skip
    buckets: dict[str, Counter] = {}
    if "bucket" in table.column_names:
        for bucket, count in zip(table["bucket"].to_pylist(), counts):
            buckets.setdefault(json.dumps(bucket), Counter()).update(documents=1, tokens=count)
    fs.makedirs(f"{task.out}/{PART_STATS_DIR}", exist_ok=True)
    if fs.exists(task.stats_path):
        fs.rm(task.stats_path)  # before the part: stats never describe a part being rewritten
    # neither a dictionary nor min/max statistics for the token ids: they took 9x the write time of a 0.5 MiB part
    # (0.053 s, 0.006 s without), and the dictionary made the part 6% larger; no reader filters on token ids
    others = [c for c in shard.column_names if c != "tokens"]
    write_parquet_atomic(fs, task.token_path, shard, use_dictionary=others, write_statistics=others)
    with fs.open(task.token_path, "rb") as written:
        size, sha256 = file_digest(written)
    stats = {
        "part": task.part.name,
        "input": task.part.identity(),
        "tokenizer_sha256": task.tokenizer_sha256,
        "validation_fraction": task.validation_fraction,
        "sources": {s: dict(c) for s, c in sorted(per_source.items())},
        "buckets": {b: dict(c) for b, c in sorted(buckets.items())},  # keys: JSON of the bucket value
        "shard": {"bytes": size, "sha256": sha256},
        "worker_pid": os.getpid(),
        "seconds": round(time.perf_counter() - started, 3),
    }
    write_json_atomic(fs, task.stats_path, stats)  # after the part: stats name only a part that is whole
    return stats


def merged_stats(tokenizer, validation_fraction: float, part_stats: list[dict]) -> dict:
    """stats.json (its keys as ever: `train` and the ablations read it) from the parts' stats."""
    sources: dict[str, Counter] = {}
    buckets: dict[str, Counter] = {}
    for stats in part_stats:
        for source, counts in stats["sources"].items():
            sources.setdefault(source, Counter()).update(counts)
        for bucket, counts in stats["buckets"].items():
            buckets.setdefault(bucket, Counter()).update(counts)
    keys = ("documents", "tokens", "validation_documents", "validation_tokens")
    return {
        "tokenizer": TOKENIZER_FILE,
        "vocab_size": tokenizer.get_vocab_size(),
        "eos_id": tokenizer.token_to_id(EOS),
        "validation_fraction": validation_fraction,
        "sources": {s: {k: sources[s][k] for k in keys} for s in sorted(sources)},
        "buckets": {json.loads(b): {"documents": c["documents"], "tokens": c["tokens"]}
                    for b, c in sorted(buckets.items(), key=lambda item: str(json.loads(item[0])))},  # fmt: skip
        SHARDS_KEY: {s["part"]: s["shard"] for s in sorted(part_stats, key=lambda s: s["part"])},
    }


@dataclass
class TokenizeResult:
    tokenizer: str  # how the tokenizer came: given, reused or trained
    stats: dict[str, dict] = field(default_factory=dict)  # run -> stats.json (runs with a failed part have none)
    skipped: int = 0  # parts already done
    removed: list[str] = field(default_factory=list)  # token parts of inputs the run no longer has, deleted
    failures: list[str] = field(default_factory=list)  # one line per failed part
    rerun_fixes: int = 0  # of the failures, those of the machine (a lost worker, a full disk): a rerun retries them
    retokenize: list[str] = field(default_factory=list)  # other runs made with the tokenizer --retrain-tokenizer replaced


def prepare(parts: dict[str, list[Part]], tokenizer_path: str | None, vocab_size: int, validation_fraction: float,
            sample_bytes: int = SAMPLE_BYTES, seed: int = SAMPLE_SEED, retrain: bool = False) -> tuple[list[PartTask], dict, TokenizeResult, object]:  # fmt: skip
    """The tokenizer given, reused or trained; the parts' tasks and the stats of those already done. Per run, in this
    order, so a run killed at any point is never taken as finished: stats.json is deleted when the tokenizer changes or
    any part is to be (re)done; then the token parts and part stats to redo, and those of inputs the run no longer has
    (an earlier, larger input); then the tokenizer and its sample record are saved."""
    from tokenizers import Tokenizer

    tokens_dirs = {}
    for run_dir in parts:
        fs, root = fsspec.core.url_to_fs(run_dir, use_listings_cache=False)
        tokens_dirs[run_dir] = (fs, f"{root.rstrip('/')}/{TOKENS_DIR}")
    record, retokenize = None, []  # the sample record of a trained or reused tokenizer; runs it leaves behind
    if tokenizer_path:
        tokenizer, how = Tokenizer.from_file(tokenizer_path), f"given ({tokenizer_path})"
        if tokenizer.token_to_id(EOS) is None:
            raise ValueError(f"tokenizer {tokenizer_path} has no {EOS} token to separate documents")
    else:
        every = [part for run_parts in parts.values() for part in run_parts]
        tokenizer, how, record, retokenize = trained_or_reused(every, tokens_dirs, vocab_size, sample_bytes, seed, retrain)
    sha, text = tokenizer_sha(tokenizer), tokenizer.to_str()
    result = TokenizeResult(how, retokenize=retokenize)
    tasks, done = [], {}
    for run_dir, run_parts in parts.items():
        fs, out = tokens_dirs[run_dir]
        fs.makedirs(f"{out}/{PART_STATS_DIR}", exist_ok=True)
        remove_temporaries(fs, out)
        saved = fs.exists(f"{out}/{TOKENIZER_FILE}") and fs.cat_file(f"{out}/{TOKENIZER_FILE}").decode() == text
        current = {part.name for part in run_parts}
        written = fs.glob(f"{out}/part-*.parquet") + fs.glob(f"{out}/{PART_STATS_DIR}/part-*.json")
        stale = [path for path in written if f"{Path(path).stem}.parquet" not in current]
        run_tasks = [PartTask(fs, part, out, f"{out}/{TOKENIZER_FILE}", sha, validation_fraction) for part in run_parts]
        tasks += run_tasks
        with ThreadPoolExecutor(max_workers=8) as pool:  # each finished part's sha256 is checked: reads in parallel
            done.update((task, stats) for task, stats in zip(run_tasks, pool.map(PartTask.finished, run_tasks)) if stats)
        redo = [path for task in run_tasks if task not in done for path in (task.stats_path, task.token_path)]
        if fs.exists(f"{out}/{STATS_FILE}") and (not saved or stale or redo):
            fs.rm(f"{out}/{STATS_FILE}")  # first: until it is written again the run is not finished
        for path in stale + [path for path in redo if fs.exists(path)]:
            fs.rm(path)  # no part of an old tokenizer or input survives beside the new ones
        result.removed += [path for path in stale if path.endswith(".parquet")]
        if not saved:
            write_text_atomic(fs, f"{out}/{TOKENIZER_FILE}", text)
        if record is not None and (not fs.exists(f"{out}/{SAMPLE_FILE}") or read_json(fs, f"{out}/{SAMPLE_FILE}") != record):
            write_json_atomic(fs, f"{out}/{SAMPLE_FILE}", record)  # after the tokenizer: a record always names a saved one
        elif record is None and fs.exists(f"{out}/{SAMPLE_FILE}"):
            fs.rm(f"{out}/{SAMPLE_FILE}")  # it describes a tokenizer this run no longer uses
    result.skipped = len(done)
    return tasks, done, result, tokenizer


def finish(tasks: list[PartTask], done: dict[PartTask, dict], result: TokenizeResult, tokenizer, validation_fraction: float) -> None:
    """stats.json for every run whose parts are all done, written last."""
    runs: dict[str, list[PartTask]] = {}
    for task in tasks:
        runs.setdefault(task.part.run, []).append(task)
    for run_dir, run_tasks in runs.items():
        if all(task in done for task in run_tasks):
            stats = merged_stats(tokenizer, validation_fraction, [done[task] for task in run_tasks])
            write_json_atomic(run_tasks[0].fs, f"{run_tasks[0].out}/{STATS_FILE}", stats)
            result.stats[run_dir] = stats


def tokenize_runs(run_dirs: list[str], tokenizer_path: str | None = None, vocab_size: int = 8192,
                  validation_fraction: float = VALIDATION_FRACTION, sample_bytes: int = SAMPLE_BYTES,
                  seed: int = SAMPLE_SEED, ray_address: str | None = None, num_cpus: int | None = None,
                  on_part=None, on_start=None, retrain_tokenizer: bool = False) -> TokenizeResult:  # fmt: skip
    """Tokenize several runs with ONE tokenizer (a mixture's sources must share it): the given one, or a byte-level
    BPE trained on a sample of the curated text of all of them (held-out documents included: a tokenizer is not trained
    on the loss), one Ray task per part. `on_start(tasks_per_run)` once the work is known; `on_part(run, stats)` per
    finished part (stats None for a part already done)."""
    from curation import ray_session

    if not 0 <= validation_fraction < 1:
        raise ValueError(f"--validation-fraction {validation_fraction} is not in [0, 1)")
    for run_dir in run_dirs:  # every run checked before any is locked or written (its parts' bytes once, below)
        folder_lock.check(run_dir, LOCK_FILE, "curate tokenize")  # a run being written has unfinished shards: name its pid
        listed_parts(run_dir, verify=False)
    locks = {}
    try:  # no `curate run` rewrites a run's parts, and no other tokenize its tokens/, while this one reads and writes
        for run_dir in run_dirs:
            locks[run_dir] = folder_lock.acquire(run_dir, LOCK_FILE, "curate tokenize")
        parts = {run_dir: listed_parts(run_dir) for run_dir in run_dirs}  # as they are now that no one else writes
        first = run_dirs[0] if "://" in run_dirs[0] else os.path.abspath(run_dirs[0])
        owner = f"tokenize:{first}"  # not the run folder `curate run` records its Ray under: cleaning up ours never stops it
        started = ray_session.connect(ray_address, num_cpus, owner=owner)  # stops a killed tokenize's workers before
        try:  # `prepare` decides what is done: none of them writes a part afterwards
            tasks, done, result, tokenizer = prepare(parts, tokenizer_path, vocab_size, validation_fraction, sample_bytes,
                                                     seed, retrain_tokenizer)  # fmt: skip
            if on_start:
                on_start(Counter(task.part.run for task in tasks))
            for task in list(done) if on_part else []:
                on_part(task.part.run, None)
            _run_tasks([task for task in tasks if task not in done], done, result, on_part)
        finally:
            ray_session.disconnect(started, owner=owner)
        finish(tasks, done, result, tokenizer, validation_fraction)
    finally:
        for run_dir, lock in locks.items():
            folder_lock.release(run_dir, lock)
    return result


def _tokenize_on_worker(task: PartTask) -> dict:
    """tokenize_part with one encoding thread: Ray gives the task one core, and its other cores run other parts."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # read by `tokenizers` when its first batch starts its threads
    spare_workers_pandas()
    return tokenize_part(task)


def _run_tasks(todo: list[PartTask], done: dict, result: TokenizeResult, on_part) -> None:
    import ray

    from curation.runner import TASK_RETRIES, last_line, ray_task_error
    from curation.segment import rerun_may_fix

    remote = ray.remote(_tokenize_on_worker).options(num_cpus=1, max_retries=TASK_RETRIES)
    pending = {remote.remote(task): task for task in todo}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        task = pending.pop(ready[0])
        try:
            done[task] = ray.get(ready[0])
        except Exception as error:
            result.failures.append(f"{task.part.run}: part {task.part.name} failed: {last_line(ray_task_error(error))}")
            result.rerun_fixes += rerun_may_fix(ray_task_error(error)) or rerun_may_fix(error)
            continue
        if on_part:
            on_part(task.part.run, done[task])


def write_tokens(run_dir: str, parts: list[str], tokenizer, validation_fraction: float) -> dict:
    """Tokenize `parts` in this process into RUN/tokens (the ablations' small runs and validation set), with the same
    files and per-part stats as `curate tokenize`: a part done with this tokenizer is skipped, others are rewritten.
    Unlike `curate tokenize` it leaves token parts of other inputs in place: the caller owns the folder; returns
    stats.json."""
    fs, root = fsspec.core.url_to_fs(run_dir, use_listings_cache=False)
    out = f"{root.rstrip('/')}/{TOKENS_DIR}"
    fs.makedirs(out, exist_ok=True)
    remove_temporaries(fs, out)
    if fs.exists(f"{out}/{STATS_FILE}"):
        fs.rm(f"{out}/{STATS_FILE}")  # before the tokenizer: until it is written again the folder is not finished
    write_text_atomic(fs, f"{out}/{TOKENIZER_FILE}", tokenizer.to_str())
    sha = tokenizer_sha(tokenizer)
    done = {}
    for path in parts:
        info = fs.info(path)
        task = PartTask(fs, Part(run_dir, path, int(info["size"]), _version(info)), out, f"{out}/{TOKENIZER_FILE}", sha, validation_fraction)
        done[task] = task.finished() or tokenize_part(task, tokenizer)
    result = TokenizeResult("given")
    finish(list(done), done, result, tokenizer, validation_fraction)
    return result.stats[run_dir]
