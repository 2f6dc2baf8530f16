"""Multiple-choice benchmarks scored by log-likelihood, as lm-evaluation-harness scores HellaSwag, ARC and MMLU.

Each choice follows the context after a space; the model's summed log-probability of the choice's tokens ranks it.
`acc` takes the highest sum, `acc_norm` the highest per byte of the choice (HellaSwag's usual figure, which does not
favour short endings). Each accuracy comes with its 95% Wilson interval: a few hundred items leave several points of
noise, and an ablation must not read that noise as a difference.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from training.export import load_run


@dataclass
class ChoiceScores:
    items: int
    acc: float
    acc_interval: tuple[float, float]
    acc_norm: float
    acc_norm_interval: tuple[float, float]
    chance: float  # the accuracy of guessing: the mean over items of 1 / choices
    item_correct: list[int]  # 1 where `acc` picked the answer, in item order: what a paired comparison resamples
    # per item the right choice's log-probability per character (DataDecide's CORRECT_PROB per char): continuous, so
    # it orders two small models that both sit at chance accuracy
    item_gold_per_char: list[float] = field(default_factory=list)


def wilson_interval(correct: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion: sensible at 0, at 1 and for small totals, unlike mean +- 2 SE."""
    if total == 0:
        return (0.0, 1.0)
    share = correct / total
    centre = (share + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


def choice_log_likelihoods(model, tokenizer, context: str, choices: list[str]) -> list[float]:
    """Summed log-probability of each choice's tokens after the context; a context too long for the model loses its
    beginning."""
    return many_choice_log_likelihoods(model, tokenizer, [(context, choices)])[0]


@torch.no_grad()
def many_choice_log_likelihoods(model, tokenizer, items: list[tuple[str, list[str]]], batch: int = 64) -> list[list[float]]:
    """choice_log_likelihoods of many (context, choices) at once: every (item, choice) row, sorted by length, in
    right-padded batches (a causal model's positions before the padding do not see it); the log-softmax is taken only
    at the positions that predict a choice's tokens, and the output layer applied there only. One forward per batch,
    not one per item."""
    limit = model.config.max_seq_len
    rows, counts, owners = [], [], []
    for number, (context, choices) in enumerate(items):
        context_ids = tokenizer.encode(context).ids
        for choice in choices:
            ids = tokenizer.encode(" " + choice).ids or [0]
            row = (context_ids + ids)[-limit - 1 :]
            rows.append(row)
            counts.append(min(len(ids), len(row) - 1))
            owners.append(number)
    sums = torch.zeros(len(rows), dtype=torch.float64)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        inputs = torch.zeros(len(chunk), max(len(rows[i]) for i in chunk) - 1, dtype=torch.long)
        at_row, at_position, targets = [], [], []
        for slot, i in enumerate(chunk):
            row, count = rows[i], counts[i]
            inputs[slot, : len(row) - 1] = torch.tensor(row[:-1])
            at_row += [slot] * count
            at_position += range(len(row) - 1 - count, len(row) - 1)
            targets += row[-count:]
        logits = model.output(model.norm(model.hidden(inputs)[torch.tensor(at_row), torch.tensor(at_position)])).float()
        picked = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(targets)[:, None])[:, 0].double()
        sums.index_add_(0, torch.tensor(chunk)[torch.tensor(at_row)], picked)
    out: list[list[float]] = [[] for _ in items]
    for owner, value in zip(owners, sums.tolist()):
        out[owner].append(value)
    return out


def score(model, tokenizer, items) -> ChoiceScores:
    """Accuracy over items that have `context`, `choices` and `answer` (an index), e.g. curate's benchmark items."""
    item_correct, gold_per_char, correct_norm = [], [], 0
    every_sums = many_choice_log_likelihoods(model, tokenizer, [(item.context, item.choices) for item in items])
    for item, sums in zip(items, every_sums):
        gold_per_char.append(sums[item.answer] / max(1, len(" " + item.choices[item.answer])))
        per_byte = [s / max(1, len(choice.encode("utf-8"))) for s, choice in zip(sums, item.choices)]
        item_correct.append(int(max(range(len(sums)), key=sums.__getitem__) == item.answer))
        correct_norm += max(range(len(per_byte)), key=per_byte.__getitem__) == item.answer
    total, correct = len(items), sum(item_correct)
    chance = sum(1 / len(item.choices) for item in items) / max(1, total)
    return ChoiceScores(total, correct / max(1, total), wilson_interval(correct, total), correct_norm / max(1, total),
                        wilson_interval(correct_norm, total), chance, item_correct, gold_per_char)  # fmt: skip


def score_run(run: str | Path, benchmarks: dict[str, list]) -> dict[str, ChoiceScores]:
    """Every benchmark's scores for the latest complete checkpoint of a training run, on this process's CPU."""
    model, tokenizer = load_run(run)
    return {name: score(model, tokenizer, items) for name, items in benchmarks.items()}
