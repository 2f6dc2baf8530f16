"""A scoring head trained on annotations over a frozen encoder (FineWeb-Edu's recipe: an embedding model kept as it is,
a regression head fitted to LLM-written 0-5 scores), saved as a Hugging Face `…ForSequenceClassification` folder that
the `model_score` stage, and transformers itself, load as they load any classifier.

The head is the one transformers puts on that encoder (BERT's `classifier` after its pooler; a decoder's `score` on
its last token, which has no bias: a model `train export` wrote is such a decoder), and it is fitted on exactly the
features transformers feeds it, caught at the head's input, so what is saved scores as it was fitted: ridge regression
in closed form for a regression head, an L2 softmax regression (L-BFGS) for classes.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class HeadFit:
    model: object  # the …ForSequenceClassification with its fitted head
    tokenizer: object
    features: int


def _head(model):
    """The linear layer that makes the logits: `classifier` (BERT and kin) or `score` (decoders)."""
    import torch

    for name in ("classifier", "score"):
        layer = getattr(model, name, None)
        if isinstance(layer, torch.nn.Linear):
            return layer
    raise ValueError(f"{type(model).__name__}: its head is not one linear layer (`classifier` or `score`); "
                     "use an encoder of the BERT family or a decoder such as a `train export`")  # fmt: skip


def load_for_head(encoder: str, num_labels: int, labels: list[str] | None = None):
    """The encoder as transformers' sequence classifier with a new head, and its tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if not Path(encoder).exists():
        raise ValueError(f"encoder folder not found: {encoder}")
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


def head_features(model, tokenizer, texts: list[str], max_tokens: int, batch: int = 16) -> np.ndarray:
    """What the head sees per document: its input, caught by a hook (a decoder's at the last token that is not padding)."""
    import torch

    caught = []
    hook = _head(model).register_forward_hook(lambda module, inputs, output: caught.append(inputs[0]))
    rows = []
    try:
        with torch.inference_mode():
            for start in range(0, len(texts), batch):
                encoded = tokenizer(texts[start : start + batch], truncation=True, max_length=max_tokens, padding=True,
                                    return_tensors="pt")  # fmt: skip
                caught.clear()
                model(**encoded)
                seen = caught[0]
                if seen.dim() == 3:  # a decoder scores every position and keeps its last real token's
                    last = encoded["attention_mask"].sum(1) - 1
                    seen = seen[torch.arange(seen.shape[0]), last]
                rows.append(seen.float().numpy())
    finally:
        hook.remove()
    return np.concatenate(rows)


def fit_head(model, features: np.ndarray, targets: np.ndarray, task: str, l2: float = 1e-3) -> None:
    """Set the head's weights: ridge regression (one output) or softmax regression over classes 0..k-1."""
    import torch

    head = _head(model)
    # fitted on standardized features, folded back into the weights after (centred only where the head has a bias)
    mean = features.mean(0) if head.bias is not None else np.zeros(features.shape[1])
    scale = features.std(0) + 1e-6
    x = torch.tensor((features - mean) / scale, dtype=torch.float64)
    if head.bias is not None:
        x = torch.cat([x, torch.ones(len(x), 1, dtype=torch.float64)], 1)
    if task == "regression":
        y = torch.tensor(targets, dtype=torch.float64)[:, None]
        penalty = l2 * len(x) * torch.eye(x.shape[1], dtype=torch.float64)
        if head.bias is not None:
            penalty[-1, -1] = 0
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
    bias = (weights[:, len(mean)] if head.bias is not None else 0) - linear @ torch.tensor(mean, dtype=torch.float64)
    with torch.no_grad():
        head.weight.copy_(linear.to(head.weight.dtype))
        if head.bias is not None:
            head.bias.copy_(bias.to(head.bias.dtype))


def train_head(encoder: str, texts: list[str], targets: list[int], task: str, max_tokens: int, out: str) -> HeadFit:
    """Fit and save (`out`: model and tokenizer, save_pretrained's layout)."""
    classes = sorted(set(targets)) if task == "classes" else None
    model, tokenizer = load_for_head(encoder, 1 if task == "regression" else len(classes),
                                     [str(c) for c in classes] if classes else None)  # fmt: skip
    features = head_features(model, tokenizer, texts, max_tokens)
    values = np.asarray(targets, dtype=float) if task == "regression" else np.array([classes.index(t) for t in targets])
    fit_head(model, features, values, task)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return HeadFit(model, tokenizer, features.shape[1])
