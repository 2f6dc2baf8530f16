"""Curated text -> token shards (`id`, `source`, `tokens: list<int32>`, `n_tokens`, `split`, and the curation columns
a mixture can select by: `bucket`, `quality_score`, `language`, `repository`, `repo_has_tests`) with the tokenizer.

`split` holds out a validation slice by a hash of each document's id (`shard_contract.held_out`): the same documents
whatever the run, never trained on, scored by `train` every `eval_every` steps.

With no tokenizer given, a byte-level BPE is trained with HF `tokenizers` on the curated text itself.
"""

from collections import Counter
from pathlib import Path

import fsspec
import pyarrow as pa

from curation.io import read_json, read_parquet, write_json_atomic, write_parquet_atomic, write_text_atomic
from curation.run_folder import final_stage_dir
from shard_contract import EOS_TOKEN as EOS
from shard_contract import FILE_SEP_TOKEN, REPO_NAME_TOKEN, SHARDS_KEY, SPLIT_COLUMN, STATS_FILE, TOKEN_SCHEMA, TOKENIZER_FILE, TRAIN, VALIDATION, file_digest, held_out

METADATA_COLUMNS = ("bucket", "quality_score", "language", "repository", "repo_has_tests")
TOKENS_DIR = "tokens"
VALIDATION_FRACTION = 0.01


def curated_parts(run_dir: str) -> list[str]:
    """The parts of the last stage of the recipe a `curate run` folder was last run with."""
    fs, root = fsspec.core.url_to_fs(run_dir)
    manifest = f"{root.rstrip('/')}/manifest.json"
    if not fs.exists(manifest):
        raise FileNotFoundError(f"{run_dir} has no manifest.json: is it the output folder of `curate run`?")
    done = read_json(fs, manifest)
    last = final_stage_dir(done, run_dir)
    finished, shards = len(done["stages"].get(last, {}).get("shards", {})), len(done.get("inputs", []))
    parts = sorted(fs.glob(f"{root.rstrip('/')}/{last}/part-*.parquet"))
    if not parts or finished < shards:
        raise FileNotFoundError(f"{run_dir}/{last}: {finished} of {shards} shards finished: rerun `curate run` to finish it")
    return parts


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


def tokenize_runs(run_dirs: list[str], tokenizer_path: str | None = None, vocab_size: int = 8192,
                  validation_fraction: float = VALIDATION_FRACTION) -> dict[str, dict]:  # fmt: skip
    """Tokenize several runs with ONE tokenizer (a mixture's sources must share it): the given one, or a byte-level
    BPE trained on the curated text of all of them (held-out documents included: a tokenizer is not trained on the
    loss). Returns each run's stats."""
    if not 0 <= validation_fraction < 1:
        raise ValueError(f"--validation-fraction {validation_fraction} is not in [0, 1)")
    from tokenizers import Tokenizer

    parts = {run_dir: curated_parts(run_dir) for run_dir in run_dirs}  # every run checked before any work

    def texts():
        for run_dir, run_parts in parts.items():
            fs, _ = fsspec.core.url_to_fs(run_dir)
            for part in run_parts:
                yield from read_parquet(fs, part)["text"].to_pylist()

    tokenizer = Tokenizer.from_file(tokenizer_path) if tokenizer_path else train_tokenizer(texts(), vocab_size)
    if tokenizer.token_to_id(EOS) is None:
        raise ValueError(f"tokenizer {tokenizer_path} has no {EOS} token to separate documents")
    return {run_dir: write_tokens(run_dir, run_parts, tokenizer, validation_fraction) for run_dir, run_parts in parts.items()}


def write_tokens(run_dir: str, parts: list[str], tokenizer, validation_fraction: float, batch_size: int = 1024) -> dict:
    fs, root = fsspec.core.url_to_fs(run_dir)
    out = f"{root.rstrip('/')}/{TOKENS_DIR}"
    fs.makedirs(out, exist_ok=True)
    write_text_atomic(fs, f"{out}/{TOKENIZER_FILE}", tokenizer.to_str())

    docs, tokens, buckets, bucket_docs, held_docs, held_tokens = Counter(), Counter(), Counter(), Counter(), Counter(), Counter()
    digests = {}
    for part in parts:
        table = read_parquet(fs, part)
        ids, sources, encoded = [], [], []
        for start in range(0, table.num_rows, batch_size):
            chunk = table.slice(start, batch_size)
            encoded += [e.ids for e in tokenizer.encode_batch(chunk["text"].to_pylist())]
            ids += chunk["id"].to_pylist()
            sources += chunk["source"].to_pylist()
        counts = [len(e) for e in encoded]
        splits = [VALIDATION if held_out(doc_id, validation_fraction) else TRAIN for doc_id in ids]
        for source, count, split in zip(sources, counts, splits):
            docs[source] += 1
            tokens[source] += count
            held_docs[source] += split == VALIDATION
            held_tokens[source] += count if split == VALIDATION else 0
        shard = pa.table({"id": ids, "source": sources, "tokens": encoded, "n_tokens": counts}, schema=TOKEN_SCHEMA)
        shard = shard.append_column(SPLIT_COLUMN, pa.array(splits, pa.string()))
        for column in METADATA_COLUMNS:
            if column in table.column_names:
                shard = shard.append_column(table.schema.field(column), table[column])
        if "bucket" in table.column_names:
            for bucket, count in zip(table["bucket"].to_pylist(), counts):
                buckets[bucket] += count
                bucket_docs[bucket] += 1
        write_parquet_atomic(fs, f"{out}/{Path(part).name}", shard)
        with fs.open(f"{out}/{Path(part).name}", "rb") as written:
            size, sha256 = file_digest(written)
        digests[Path(part).name] = {"bytes": size, "sha256": sha256}
    stats = {
        "tokenizer": TOKENIZER_FILE,
        "vocab_size": tokenizer.get_vocab_size(),
        "eos_id": tokenizer.token_to_id(EOS),
        "validation_fraction": validation_fraction,
        "sources": {s: {"documents": docs[s], "tokens": tokens[s], "validation_documents": held_docs[s],
                        "validation_tokens": held_tokens[s]} for s in sorted(docs)},  # fmt: skip
        "buckets": {b: {"documents": bucket_docs[b], "tokens": buckets[b]} for b in sorted(buckets, key=str)},
        SHARDS_KEY: digests,
    }
    write_json_atomic(fs, f"{out}/{STATS_FILE}", stats)
    return stats
