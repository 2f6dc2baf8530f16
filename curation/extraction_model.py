"""Training the `resiliparse_blocks` extractor's block classifier on the development sets' training split.

A block is labelled main content when most of its 4-word shingles (a short block: its words, in order) are in the
page's reference text. The network (filters/extract_blocks.py) is fitted with torch on those labels, and the
threshold is the one whose pages score the best F1 on the training split; the held-out split is never seen.
"""

import numpy as np

from curation.extraction_sets import Page, page_counts, score, shingles, tokens
from filters.extract_blocks import FEATURES, Block, BlockModel, block_features, main_content_blocks


def block_labels(blocks: list[Block], reference: str) -> np.ndarray:
    truth = shingles(reference)
    joined = " " + " ".join(tokens(reference)) + " "
    labels = []
    for block in blocks:
        words = tokens(block.text)
        if len(words) < 4:
            labels.append(bool(words) and f" {' '.join(words)} " in joined)
            continue
        found = shingles(block.text)
        labels.append(sum((found & truth).values()) >= 0.5 * sum(found.values()))
    return np.asarray(labels, dtype=np.float32)


def page_blocks(pages: list[Page]) -> list[list[Block]]:
    return [main_content_blocks(page.html) for page in pages]


def f1_of(pages: list[Page], blocks: list[list[Block]], keeps: list[np.ndarray]) -> dict[str, float]:
    counts = []
    for page, page_blocks_, keep in zip(pages, blocks, keeps):
        text = "\n".join(block.text for block, kept in zip(page_blocks_, keep) if kept)
        counts.append(page_counts(page.reference, text))
    return score(counts)


def train_block_model(pages: list[Page], hidden: int = 4, epochs: int = 400, weight_decay: float = 1e-3,
                      seed: int = 0) -> tuple[BlockModel, dict]:
    """The classifier and its training-split figures (blocks, share labelled content, chosen threshold, F1). The
    width and weight decay were chosen by 3-fold cross-validation inside the training split."""
    import torch

    blocks = page_blocks(pages)
    features = [block_features(b) for b in blocks]
    labels = [block_labels(b, page.reference) for b, page in zip(blocks, pages)]
    x = np.concatenate([f for f in features if len(f)]).astype(np.float32)
    y = np.concatenate([l for l in labels if len(l)])
    mean, scale = x.mean(0), x.std(0) + 1e-6
    torch.manual_seed(seed)
    network = torch.nn.Sequential(torch.nn.Linear(len(FEATURES), hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
    optimiser = torch.optim.Adam(network.parameters(), lr=0.01, weight_decay=weight_decay)
    inputs, targets = torch.from_numpy((x - mean) / scale), torch.from_numpy(y)
    for _ in range(epochs):
        optimiser.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(network(inputs)[:, 0], targets)
        loss.backward()
        optimiser.step()
    first, last = network[0], network[2]
    model = BlockModel(mean=mean, scale=scale, hidden_weight=first.weight.detach().numpy().T.copy(),
                       hidden_bias=first.bias.detach().numpy().copy(), out_weight=last.weight.detach().numpy()[0].copy(),
                       out_bias=float(last.bias.detach()), threshold=0.5, trained_on=tuple(sorted({page.name for page in pages})))  # fmt: skip
    probabilities = [model.probabilities(f) if len(f) else np.zeros(0) for f in features]
    by_threshold = {t: f1_of(pages, blocks, [p >= t for p in probabilities])["f1"] for t in np.arange(0.1, 0.91, 0.05)}
    threshold = float(max(by_threshold, key=by_threshold.get))
    model = BlockModel(**{**model.__dict__, "threshold": round(threshold, 2)})
    figures = {"pages": len(pages), "blocks": int(len(y)), "content_share": float(y.mean()), "threshold": model.threshold,
               "train_f1": by_threshold[threshold], "final_loss": float(loss.detach())}  # fmt: skip
    return model, figures
