"""The token-shard contract between `curate tokenize` (which writes shards) and `train` (which reads them), named
once: curation imports it from here, and training imports nothing from curation."""

import pyarrow as pa

EOS_TOKEN = "<|endoftext|>"  # ends every document in the token stream
TOKENIZER_FILE = "tokenizer.json"  # beside the shards, and beside a training run
TOKEN_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("tokens", pa.list_(pa.int32())), ("n_tokens", pa.int32())])
