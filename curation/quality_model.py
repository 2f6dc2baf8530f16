"""A scoring head trained on annotations over a frozen encoder (FineWeb-Edu's recipe: an embedding model kept as it is,
a regression head fitted to LLM-written 0-5 scores), saved as a Hugging Face `…ForSequenceClassification` folder that
the `model_score` stage loads.

The head is the one transformers puts on that encoder (BERT's `classifier`, a decoder's `score`), fitted in closed
form (ridge regression) for a score or by L2 softmax regression (L-BFGS) for classes, on one of two inputs:
- `head`: exactly what transformers feeds it (BERT's pooled first token; a decoder's last token), caught by a hook, so
  transformers alone scores the saved folder as it was fitted;
- `mean`: the last hidden states averaged over the document's tokens, which a small decoder such as a `train export`
  needs (on FineWeb's 0-5 scores under a 48-wide export: held-out Spearman 0.63 against 0.27 for its last token). The
  config then says `score_pooling: mean` (and `score_bias`, where the head has no bias), which model_score follows.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from filters.model_score import classifier_head


@dataclass
class HeadFit:
    model: object  # the …ForSequenceClassification with its fitted head
    tokenizer: object
    features: int


def load_for_head(encoder: str, num_labels: int, labels: list[str] | None = None):
    """The encoder as transformers' sequence classifier with a new head, and its tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if not Path(encoder).exists():
        raise ValueError(f"encoder folder not found: {encoder}")
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()  # its load report lists the new head as "missing": it is, on purpose
    try:
        tokenizer = AutoTokenizer.from_pretrained(encoder)
        names = {"id2label": dict(enumerate(labels)), "label2id": {n: i for i, n in enumerate(labels)}} if labels else {}
        model = AutoModelForSequenceClassification.from_pretrained(encoder, num_labels=num_labels, **names).eval()
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"{encoder} does not load as an encoder with a sequence-classification head "
                         f"({str(error).strip().splitlines()[0][:200]})") from None  # fmt: skip
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def head_features(model, tokenizer, texts: list[str], max_tokens: int, pooling: str = "head", batch: int = 16) -> np.ndarray:
    """What the head sees per document: with `head` its input, caught by a hook (a decoder's at the last token that is
    not padding); with `mean` the mean of the last hidden states over the document's tokens."""
    import torch

    from filters.model_score import mean_pooled_hidden

    caught = []
    hook = classifier_head(model).register_forward_hook(lambda module, inputs, output: caught.append(inputs[0]))
    rows = []
    try:
        with torch.inference_mode():
            for start in range(0, len(texts), batch):
                encoded = tokenizer(texts[start : start + batch], truncation=True, max_length=max_tokens, padding=True,
                                    return_tensors="pt")  # fmt: skip
                caught.clear()
                if pooling == "mean":
                    rows.append(mean_pooled_hidden(model, dict(encoded)).numpy())
                    continue
                model(**encoded)
                seen = caught[0]
                if seen.dim() == 3:  # a decoder scores every position and keeps its last real token's
                    last = encoded["attention_mask"].sum(1) - 1
                    seen = seen[torch.arange(seen.shape[0]), last]
                rows.append(seen.float().numpy())
    finally:
        hook.remove()
    return np.concatenate(rows)


def fit_head(model, features: np.ndarray, targets: np.ndarray, task: str, intercept: bool = True,
             l2: float = 1e-3) -> np.ndarray | None:  # fmt: skip
    """Set the head's weights (ridge regression for one output, softmax regression over classes 0..k-1), with an
    intercept unless told not to; returns the intercept where the head has no bias to hold it (None otherwise)."""
    import torch

    head = classifier_head(model)
    mean = features.mean(0) if intercept else np.zeros(features.shape[1])
    scale = features.std(0) + 1e-6  # fitted on standardized features, folded back after
    x = torch.tensor((features - mean) / scale, dtype=torch.float64)
    x = torch.cat([x, torch.full((len(x), 1), float(intercept), dtype=torch.float64)], 1)
    if task == "regression":
        y = torch.tensor(targets, dtype=torch.float64)[:, None]
        penalty = l2 * len(x) * torch.eye(x.shape[1], dtype=torch.float64)
        penalty[-1, -1] = 0 if intercept else 1
        weights = torch.linalg.solve(x.T @ x + penalty, x.T @ y).T
    else:
        y = torch.tensor(targets, dtype=torch.long)
        weights = torch.zeros(head.out_features, x.shape[1], dtype=torch.float64, requires_grad=True)
        optimizer = torch.optim.LBFGS([weights], max_iter=500, line_search_fn="strong_wolfe")

        def loss():
            optimizer.zero_grad()
            value = torch.nn.functional.cross_entropy(x @ weights.T, y) + l2 * (weights[:, : len(mean)] ** 2).sum()
            value.backward()
            return value

        optimizer.step(loss)
        weights = weights.detach()
    linear = weights[:, : len(mean)] / torch.tensor(scale, dtype=torch.float64)
    bias = weights[:, len(mean)] - linear @ torch.tensor(mean, dtype=torch.float64)
    with torch.no_grad():
        head.weight.copy_(linear.to(head.weight.dtype))
        if head.bias is not None:
            head.bias.copy_(bias.to(head.bias.dtype))
    return None if head.bias is not None or not intercept else bias.numpy()


def train_head(encoder: str, texts: list[str], targets: list[int], task: str, max_tokens: int, out: str,
               pooling: str = "auto") -> HeadFit:  # fmt: skip
    """Fit and save (`out`: model and tokenizer, save_pretrained's layout). `auto` pooling: `mean` for a decoder (its
    last token knows little of a whole page), `head` for an encoder, whose pooled first token was trained for it."""
    classes = sorted(set(targets)) if task == "classes" else None
    model, tokenizer = load_for_head(encoder, 1 if task == "regression" else len(classes),
                                     [str(c) for c in classes] if classes else None)  # fmt: skip
    if pooling == "auto":
        pooling = "mean" if hasattr(model, "score") else "head"  # decoders name their head `score`
    features = head_features(model, tokenizer, texts, max_tokens, pooling)
    values = np.asarray(targets, dtype=float) if task == "regression" else np.array([classes.index(t) for t in targets])
    # a head without bias read by transformers itself (`head` pooling) is fitted without an intercept
    bias = fit_head(model, features, values, task, intercept=pooling == "mean" or classifier_head(model).bias is not None)
    if pooling == "mean":
        model.config.score_pooling = "mean"
        if bias is not None:
            model.config.score_bias = bias.tolist()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return HeadFit(model, tokenizer, features.shape[1])
