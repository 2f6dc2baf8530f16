"""Per-document validation losses of a run's checkpoint: what a paired comparison of two runs resamples.

The validation loss that training logs is a mean over packed sequences; comparing data recipes needs each held-out
document's own loss, so two runs can be paired document by document. A document is scored as training sees it: after
EOS (the token before every document in the stream), each token predicted from the ones before it. A document longer
than the training sequence is cut into windows of `seq_len` predictions, each starting from the last token of the
one before (a new context, as at a sequence boundary in training). Windows of all documents are batched by length.
"""

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from shard_contract import EOS_TOKEN
from training.export import load_run

DOC_LOSS_SCHEMA = pa.schema([("id", pa.string()), ("tokens", pa.int64()), ("loss_sum", pa.float64())])


def windows(tokens: list[int], eos_id: int, seq_len: int) -> list[list[int]]:
    """EOS + the document as windows of at most seq_len + 1 tokens overlapping by one: every token predicted once."""
    stream = [eos_id, *tokens]
    return [stream[start : start + seq_len + 1] for start in range(0, len(stream) - 1, seq_len)]


@torch.no_grad()
def loss_sums(model, documents: list[list[int]], eos_id: int, seq_len: int, batch: int = 32) -> np.ndarray:
    """Each document's summed loss in nats over its tokens (0 for an empty document)."""
    pieces = [(doc, window) for doc, tokens in enumerate(documents) for window in windows(tokens, eos_id, seq_len)]
    pieces.sort(key=lambda piece: len(piece[1]))  # similar lengths share a batch: little padding
    sums = np.zeros(len(documents), dtype=np.float64)
    for start in range(0, len(pieces), batch):
        chunk = pieces[start : start + batch]
        width = max(len(window) for _, window in chunk) - 1
        inputs = torch.zeros(len(chunk), width, dtype=torch.long)
        targets = torch.full((len(chunk), width), -100, dtype=torch.long)  # padding is ignored
        for row, (_, window) in enumerate(chunk):
            inputs[row, : len(window) - 1] = torch.tensor(window[:-1])
            targets[row, : len(window) - 1] = torch.tensor(window[1:])
        logits = model(inputs).float()
        losses = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100,
                                                   reduction="none")  # flat: the (batch, vocab, time) layout is slow on CPU
        np.add.at(sums, [doc for doc, _ in chunk], losses.view(len(chunk), width).sum(dim=1).double().numpy())
    return sums


def score_documents(run: str | Path, ids: list[str], documents: list[list[int]], seq_len: int) -> pa.Table:
    """(id, tokens, loss_sum) of every document under the run's latest complete checkpoint, on this process's CPU."""
    model, tokenizer = load_run(run)
    sums = loss_sums(model, documents, tokenizer.token_to_id(EOS_TOKEN), seq_len)
    return pa.table({"id": ids, "tokens": [len(doc) for doc in documents], "loss_sum": sums}, schema=DOC_LOSS_SCHEMA)
