"""The token-shard contract between `curate tokenize` (which writes shards) and `train` (which reads them), named
once: both import it from here, and neither imports the other."""

import hashlib

import pyarrow as pa

EOS_TOKEN = "<|endoftext|>"  # ends every document in the token stream
TOKENIZER_FILE = "tokenizer.json"  # beside the shards, and beside a training run
TOKEN_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("tokens", pa.list_(pa.int32())), ("n_tokens", pa.int32())])
STATS_FILE = "stats.json"  # beside the shards: counts, and each shard's bytes and sha256 under SHARDS_KEY
SHARDS_KEY = "shards"
PART_STATS_DIR = "parts"  # beside the shards: a finished part's stats; with no STATS_FILE, a tokenize run that did not finish
SPLIT_COLUMN = "split"  # "train" or "validation": a document's side of the held-out slice
TRAIN, VALIDATION = "train", "validation"


def held_out(doc_id: str, fraction: float) -> bool:
    """Whether a document belongs to the validation slice: by a hash of its id, so the same documents are held out
    whatever the run, the shard order or the number of workers."""
    digest = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2**64


def file_digest(handle, chunk: int = 1 << 20) -> tuple[int, str]:
    """(bytes, sha256 hex) of an open binary file, streamed: what `curate tokenize` records of each shard and what
    `train` checks before its first step, so a changed or half-copied shard never trains."""
    digest, size = hashlib.sha256(), 0
    while block := handle.read(chunk):
        digest.update(block)
        size += len(block)
    return size, digest.hexdigest()
# StarCoder2's repository-level documents: `<repo_name>NAME<file_sep>PATH\nCODE<file_sep>PATH\nCODE...`, both markers
# special tokens of every tokenizer `curate tokenize` trains
REPO_NAME_TOKEN = "<repo_name>"
FILE_SEP_TOKEN = "<file_sep>"
