"""`train plan`: a mixture resolved against what was curated — tokens available per source, tokens each phase
asks of it, and the epochs that makes — checked against each source's `max_epochs` before any GPU time is spent.

Available tokens are counted from the token shards themselves (each document's tokens plus its EOS, rows a
source's `where` selects, the held-out validation rows left out), so a bucket is measured like any other source.
The tokens asked are those `train` would run (its config's steps), given as steps or tokens, or the Chinchilla
budget of 20 tokens per parameter; each phase counts its tokens at its own sequence length and batch.
"""

from dataclasses import dataclass

from training.data import ShardRows, read_sources
from training.mixture import Mixture

CHINCHILLA_TOKENS_PER_PARAM = 20


@dataclass
class SourcePlan:
    name: str
    documents: int
    available: int  # tokens, EOS included
    asked: int
    max_epochs: float
    held_out: int  # validation tokens, never trained on

    @property
    def epochs(self) -> float:
        return self.asked / self.available if self.available else float("inf")

    @property
    def ok(self) -> bool:
        return self.epochs <= self.max_epochs


def available_tokens(shards: list[ShardRows]) -> tuple[int, int, int]:
    """(documents, tokens with one EOS each) of a source's training rows after its `where`, and its held-out tokens."""
    documents, tokens, held_out = 0, 0, 0
    for shard in shards:
        lengths = shard.meta["n_tokens"].to_numpy() + 1
        documents += len(shard.train)
        tokens += int(lengths[shard.train].sum())
        held_out += int(lengths[shard.held_out].sum())
    return documents, tokens, held_out


def asked_tokens(mixture: Mixture, phase_tokens: list[int]) -> dict[str, float]:
    """Per source the tokens the phases, training `phase_tokens` each, ask of it: known before any shard exists."""
    asked = dict.fromkeys(mixture.source_names(), 0.0)
    for phase, tokens in enumerate(phase_tokens):
        for name, weight in zip(mixture.source_names(), mixture.weights(phase)):
            asked[name] += tokens * weight
    return asked


def plan(mixture: Mixture, phase_tokens: list[int], shards: dict[str, list[ShardRows]] | None = None) -> list[SourcePlan]:
    """Per source what it has (from `shards`, read here when not given) and what the phases, training
    `phase_tokens` each, ask of it."""
    shards = shards or read_sources(mixture)
    asked = asked_tokens(mixture, phase_tokens)
    sources = []
    for name in mixture.source_names():
        documents, tokens, held_out = available_tokens(shards[name])
        sources.append(SourcePlan(name, documents, tokens, round(asked[name]), mixture.sources[name].max_epochs, held_out))
    return sources


def over_cap(sources: list[SourcePlan]) -> str | None:
    """The message `train` and `train plan` fail with, or None."""
    bad = [s for s in sources if not s.ok]
    if not bad:
        return None
    return "; ".join(
        f"source {s.name!r} would be repeated {s.epochs:.1f} times ({s.asked:,} tokens asked of {s.available:,}), "
        f"over its max_epochs {s.max_epochs:g}" for s in bad
    ) + ": curate more, lower its weight, train on fewer tokens, or raise max_epochs"
