"""Mixture data: token shards per source -> packed sequences, with a global, DP-agnostic loader state.

Each source is one virtual token stream: its documents in a seeded order per epoch, each followed by EOS.
Sequence k of a source is the window [k*seq_len, k*seq_len + seq_len + 1) of that stream, so a sequence
holds one source and knows its documents. Which source the n-th sequence of the run comes from is decided by
deficit round-robin on token counts (the source furthest below its weight goes next): deterministic, and
within one sequence of the target weights at every point. A curriculum switches phases at the step where its
token count is reached, and the deficits restart there, so each phase has its own proportions while every
source's stream continues where it was. The whole state is the step, the phase, and the sequences drawn per
source in all and in this phase; every rank walks the same global plan and materializes only its slice of each
global batch, so a checkpoint resumes on any number of ranks that divides the global batch.
"""

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from training import storage
from training.mixture import Mixture, SourceFilter


def read_selected(path: str, columns: list[str], where: SourceFilter | None) -> tuple[pa.Table, np.ndarray]:
    """`columns` of a token shard, and the rows a source's `where` keeps (all without one)."""
    if where is None:
        meta = storage.read_parquet(path, columns)
        return meta, np.arange(meta.num_rows)
    if where.column not in storage.column_names(path):
        raise ValueError(f"{path} has no column {where.column!r} to select by: tokenize a run whose stages add it")
    meta = storage.read_parquet(path, columns + [where.column])
    keep = np.ones(meta.num_rows, dtype=bool)
    for row, value in enumerate(meta[where.column].to_pylist()):
        if where.equals is not None and value != where.equals:
            keep[row] = False
        elif where.min is not None and (value is None or value < where.min):
            keep[row] = False
        elif where.max is not None and (value is None or value > where.max):
            keep[row] = False
    return meta, np.flatnonzero(keep)


def choose_sources(counts: list[int], weights: list[float], n: int) -> list[int]:
    """The next n sources by deficit round-robin; `counts` (sequences drawn so far) is updated in place."""
    picks = []
    for _ in range(n):
        total = sum(counts) + 1
        source = max(range(len(weights)), key=lambda i: weights[i] * total - counts[i])
        counts[source] += 1
        picks.append(source)
    return picks


class SourceStream:
    """One source's documents as a token stream with EOS after each document, reshuffled every epoch."""

    def __init__(self, name: str, files: list[str], seq_len: int, seed: int, eos_id: int, cached_files: int = 8,
                 where: SourceFilter | None = None):  # fmt: skip
        self.name, self.files, self.seq_len, self.seed, self.eos_id = name, files, seq_len, seed, eos_id
        ids, lengths, locations = [], [], []
        for file_index, path in enumerate(files):
            meta, rows = read_selected(path, ["id", "n_tokens"], where)
            ids += [meta["id"][int(row)].as_py() for row in rows]
            lengths.append(meta["n_tokens"].to_numpy()[rows])
            locations += [(file_index, int(row)) for row in rows]
        if not ids:
            raise ValueError(f"source {name!r}: no document of {len(files)} shard(s) matches {where}")
        self.doc_ids = ids
        self.doc_where = np.array(locations, dtype=np.int64).reshape(-1, 2)
        self.doc_lengths = np.concatenate(lengths).astype(np.int64) + 1  # + EOS
        self.per_epoch = int((self.doc_lengths.sum() - 1) // seq_len)
        if self.per_epoch < 1:
            raise ValueError(f"source {name!r} holds {self.doc_lengths.sum()} tokens: fewer than one sequence of {seq_len}")
        self._epoch, self._order, self._starts = -1, None, None
        self._tokens: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._cached_files = cached_files

    def _layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        if epoch != self._epoch:
            rng = np.random.default_rng([self.seed, epoch])
            self._order = rng.permutation(len(self.doc_lengths))
            self._starts = np.concatenate([[0], np.cumsum(self.doc_lengths[self._order])])
            self._epoch = epoch
        return self._order, self._starts

    def _doc_tokens(self, doc: int) -> np.ndarray:
        file_index, row = self.doc_where[doc]
        if file_index not in self._tokens:
            column = storage.read_parquet(self.files[file_index], ["tokens"])["tokens"].combine_chunks()
            self._tokens[file_index] = (column.values.to_numpy(), column.offsets.to_numpy())
            if len(self._tokens) > self._cached_files:
                self._tokens.popitem(last=False)
        values, offsets = self._tokens[file_index]
        return values[offsets[row] : offsets[row + 1]]

    def _span(self, k: int) -> tuple[np.ndarray, int, int, int]:
        order, starts = self._layout(k // self.per_epoch)
        begin = (k % self.per_epoch) * self.seq_len
        end = begin + self.seq_len + 1
        first = int(np.searchsorted(starts, begin, side="right") - 1)
        last = int(np.searchsorted(starts, end, side="left"))
        return order, first, last, begin

    def doc_ids_of(self, k: int) -> list[str]:
        order, first, last, _ = self._span(k)
        return [self.doc_ids[order[i]] for i in range(first, last)]

    def sequence(self, k: int) -> np.ndarray:
        """seq_len + 1 tokens: inputs are [:-1], targets [1:]."""
        order, first, last, begin = self._span(k)
        starts = self._starts
        pieces = []
        for position in range(first, last):
            doc = order[position]
            pieces += [self._doc_tokens(doc), np.array([self.eos_id])]
        stream = np.concatenate(pieces).astype(np.int64)
        offset = begin - starts[first]
        return stream[offset : offset + self.seq_len + 1]


@dataclass
class Batch:
    inputs: torch.Tensor  # (micro_batch, seq_len) int64
    targets: torch.Tensor  # (micro_batch, seq_len) int64
    sources: torch.Tensor  # (micro_batch,) int64: index into the mixture's sources


class MixtureLoader:
    """Yields each step's micro-batches for this rank; `state_dict()` is the same on every rank."""

    def __init__(self, mixture: Mixture, seq_len: int, global_batch: int, micro_batch: int, rank: int, world: int,
                 seed: int, eos_id: int, total_steps: int = 1):  # fmt: skip
        if global_batch % (micro_batch * world):
            raise ValueError(f"global_batch {global_batch} is not a multiple of micro_batch {micro_batch} x ranks {world}")
        self.mixture, self.seq_len, self.global_batch, self.micro_batch = mixture, seq_len, global_batch, micro_batch
        self.rank, self.world, self.seed = rank, world, seed
        self.names = mixture.source_names()
        self.streams = [
            SourceStream(name, mixture.shard_files(name), seq_len, seed * 1000 + i, eos_id, where=mixture.sources[name].where)
            for i, name in enumerate(self.names)
        ]
        tokens_per_step = global_batch * seq_len
        self.phase_start_steps = [-(-start // tokens_per_step) for start in mixture.phase_starts(total_steps * tokens_per_step)]
        self.counts = [0] * len(self.names)
        self.phase_counts = [0] * len(self.names)
        self.step, self.phase = 0, 0
        self.last_plan: list[tuple[int, int]] = []

    @property
    def grad_accum(self) -> int:
        return self.global_batch // (self.micro_batch * self.world)

    def phase_at(self, step: int) -> int:
        return max(p for p, start in enumerate(self.phase_start_steps) if start <= step or p == 0)

    def plan_step(self) -> list[tuple[int, int]]:
        """(source, sequence index in that source) for each sequence of the next global batch; advances the state."""
        phase = self.phase_at(self.step)
        if phase != self.phase:
            self.phase, self.phase_counts = phase, [0] * len(self.names)
        picks = choose_sources(self.phase_counts, self.mixture.weights(phase), self.global_batch)
        plan = []
        for source in picks:
            plan.append((source, self.counts[source]))
            self.counts[source] += 1
        self.step += 1
        self.last_plan = plan
        return plan

    def next_step(self) -> list[Batch]:
        plan = self.plan_step()
        share = len(plan) // self.world
        mine = plan[self.rank * share : (self.rank + 1) * share]
        batches = []
        for start in range(0, len(mine), self.micro_batch):
            chunk = mine[start : start + self.micro_batch]
            rows = np.stack([self.streams[s].sequence(k) for s, k in chunk])
            tokens = torch.from_numpy(rows)
            batches.append(Batch(tokens[:, :-1], tokens[:, 1:], torch.tensor([s for s, _ in chunk], dtype=torch.int64)))
        return batches

    def last_step_documents(self) -> list[dict]:
        """Lineage of the last global batch: per sequence its source and document ids (no token reads needed)."""
        return [{"source": self.names[s], "doc_ids": self.streams[s].doc_ids_of(k)} for s, k in self.last_plan]

    def tokens_per_source(self) -> dict[str, int]:
        return {name: count * self.seq_len for name, count in zip(self.names, self.counts)}

    def state_dict(self) -> dict:
        return {"seed": self.seed, "seq_len": self.seq_len, "step": self.step, "phase": self.phase,
                "sequences": dict(zip(self.names, self.counts)),
                "phase_sequences": dict(zip(self.names, self.phase_counts))}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        if state["seed"] != self.seed or state["seq_len"] != self.seq_len:
            raise ValueError(f"checkpoint data state has seed/seq_len {state['seed']}/{state['seq_len']}, "
                             f"this run {self.seed}/{self.seq_len}")  # fmt: skip
        self.counts = [state["sequences"].get(name, 0) for name in self.names]
        # a state from before curriculum phases had one phase: its step and phase counts follow from the sequences
        self.step, self.phase = state.get("step", sum(self.counts) // self.global_batch), state["phase"]
        self.phase_counts = [state.get("phase_sequences", state["sequences"]).get(name, 0) for name in self.names]
