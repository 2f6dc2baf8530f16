"""Mixture data: token shards per source -> packed sequences, with a global, DP-agnostic loader state.

Each source is one virtual token stream: its documents in a seeded order per epoch, each followed by EOS. A
source's position is (epoch, token offset); a sequence of length L is the window [offset, offset + L + 1) of that
epoch's stream (a window that would cross the epoch's end starts the next epoch instead), so a sequence holds one
source and knows its documents, and the length may change between curriculum phases (context extension) without
losing or repeating a token. Which source the n-th sequence of the run comes from is decided by deficit round-robin
(the source furthest below its weight goes next): deterministic, and within one sequence of the target weights at
every point. A curriculum switches phases at the step where its token count is reached, and the deficits restart
there, so each phase has its own proportions while every source's stream continues where it was. The whole state
is the step, the phase, each source's position, sequences drawn in this phase, and the documents a rewind skipped;
every rank walks the same global plan and materializes only its slice of each global batch, so a checkpoint resumes
on any number of ranks that divides the global batch.

The rows `curate tokenize` held out (`split` = validation) and a source's `validation_paths` are never trained on:
`ValidationSet` packs them, in an order fixed whatever the run's seed, for the validation loss.
"""

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from training import storage
from training.mixture import Mixture, PhaseShape, SourceFilter
from shard_contract import SPLIT_COLUMN, VALIDATION

VALIDATION_SEED = 0  # the held-out order, the same for every run


@dataclass
class ShardRows:
    """A shard's documents that a source selects (its `where` applied), as training rows and held-out rows: one
    read serves the training stream, the validation set and `train plan`."""

    path: str
    meta: pa.Table  # id, n_tokens (and the columns selected by)
    train: np.ndarray  # row indexes
    held_out: np.ndarray


def read_selected(path: str, where: SourceFilter | None) -> ShardRows:
    """A token shard's ids and lengths, and the rows a source's `where` keeps (all without one), split by the `split`
    column `curate tokenize` writes (a shard without one holds only training rows)."""
    names = storage.column_names(path)
    if where is not None and where.column not in names:
        raise ValueError(f"{path} has no column {where.column!r} to select by: tokenize a run whose stages add it")
    extra = ([where.column] if where is not None else []) + ([SPLIT_COLUMN] if SPLIT_COLUMN in names else [])
    meta = storage.read_parquet(path, ["id", "n_tokens"] + list(dict.fromkeys(extra)))
    keep = np.ones(meta.num_rows, dtype=bool)
    if where is not None:
        for row, value in enumerate(meta[where.column].to_pylist()):
            if where.equals is not None and value != where.equals:
                keep[row] = False
            elif where.min is not None and (value is None or value < where.min):
                keep[row] = False
            elif where.max is not None and (value is None or value > where.max):
                keep[row] = False
    held = np.zeros(meta.num_rows, dtype=bool)
    if SPLIT_COLUMN in names:
        held = pc.equal(meta[SPLIT_COLUMN], VALIDATION).fill_null(False).to_numpy(zero_copy_only=False)
    return ShardRows(path, meta, np.flatnonzero(keep & ~held), np.flatnonzero(keep & held))


def read_sources(mixture: Mixture, paths_of=None) -> dict[str, list[ShardRows]]:
    """Every source's shards (or, with `paths_of(name)`, other shards of it), read once for ids and lengths."""
    paths_of = paths_of or mixture.shard_files
    return {name: [read_selected(path, mixture.sources[name].where) for path in paths_of(name)]
            for name in mixture.source_names()}  # fmt: skip


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
    """One source's documents as a token stream with EOS after each document, reshuffled every epoch. Skipped
    documents (after a rewind) take no room in the stream from then on. With `shuffle_sequences` the epoch's windows
    of one sequence length are also taken in a shuffled order (OLMo shuffles its fixed-length instances so): a step's
    batch then mixes many documents instead of the consecutive windows of one long file, which makes the loss of
    small runs far less noisy (a ladder's rungs, an ablation's seeds)."""

    def __init__(self, name: str, selections: list[tuple[ShardRows, np.ndarray]], seed: int, eos_id: int, cached_files: int = 8,
                 shuffle_sequences: bool = False):  # fmt: skip
        """`selections`: each shard with the rows of it the stream holds."""
        self.name, self.files, self.seed, self.eos_id = name, [shard.path for shard, _ in selections], seed, eos_id
        self.shuffle_sequences = shuffle_sequences
        self._windows: tuple[tuple[int, int, int], np.ndarray] | None = None
        ids, lengths, locations = [], [], []
        for file_index, (shard, rows) in enumerate(selections):
            meta = shard.meta
            ids += meta["id"].take(rows).to_pylist()
            lengths.append(meta["n_tokens"].to_numpy()[rows])
            locations += [(file_index, int(row)) for row in rows]
        self.doc_ids = ids
        self.doc_where = np.array(locations, dtype=np.int64).reshape(-1, 2)
        self.doc_lengths = (np.concatenate(lengths).astype(np.int64) + 1) if lengths else np.zeros(0, np.int64)  # + EOS
        self.epoch_tokens = int(self.doc_lengths.sum())
        self.skipped: set[str] = set()
        self._epoch, self._order, self._starts = -1, None, None
        self._tokens: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._cached_files = cached_files

    def skip(self, doc_ids) -> None:
        """Leave these documents out of the stream from now on (the epoch's order of the others is kept)."""
        wanted = set(doc_ids) - self.skipped
        if not wanted:
            return
        for index, doc in enumerate(self.doc_ids):
            if doc in wanted:
                self.doc_lengths[index] = 0
        self.skipped |= wanted
        self.epoch_tokens = int(self.doc_lengths.sum())
        self._epoch = -1

    def fit(self, epoch: int, offset: int, length: int) -> tuple[int, int]:
        """Where a sequence of `length` starting at (epoch, offset) is taken: there, or at the next epoch's start."""
        if self.epoch_tokens < length + 1:
            raise ValueError(f"source {self.name!r} holds {self.epoch_tokens} tokens: fewer than one sequence of {length}")
        return (epoch, offset) if offset + length + 1 <= self.epoch_tokens else (epoch + 1, 0)

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

    def _window(self, epoch: int, offset: int, length: int) -> int:
        """Where the window the state calls (epoch, offset) lies in the epoch's stream: there, or, with shuffled
        sequences, at the place of the epoch's permutation of its windows of this length."""
        if not self.shuffle_sequences:
            return offset
        key = (epoch, length, self.epoch_tokens)
        if self._windows is None or self._windows[0] != key:
            count = (self.epoch_tokens - 1) // length
            self._windows = key, np.random.default_rng([self.seed, epoch, length, 1]).permutation(count)
        return int(self._windows[1][offset // length]) * length

    def _documents(self, epoch: int, offset: int, length: int) -> tuple[list[int], int, int]:
        """The documents (indexes) the window the state calls (epoch, offset) overlaps, in stream order, where the
        first of them starts, and where the window lies in the stream."""
        offset = self._window(epoch, offset, length)
        order, starts = self._layout(epoch)
        first = int(np.searchsorted(starts, offset, side="right") - 1)
        last = int(np.searchsorted(starts, offset + length + 1, side="left"))
        return [int(order[i]) for i in range(first, last) if self.doc_lengths[order[i]]], int(starts[first]), offset

    def doc_ids_of(self, epoch: int, offset: int, length: int) -> list[str]:
        return [self.doc_ids[doc] for doc in self._documents(epoch, offset, length)[0]]

    def sequence(self, epoch: int, offset: int, length: int) -> np.ndarray:
        """length + 1 tokens: inputs are [:-1], targets [1:]."""
        documents, first_start, offset = self._documents(epoch, offset, length)
        pieces = []
        for doc in documents:
            pieces += [self._doc_tokens(doc), np.array([self.eos_id])]
        stream = np.concatenate(pieces).astype(np.int64)
        return stream[offset - first_start : offset - first_start + length + 1]


@dataclass
class Batch:
    inputs: torch.Tensor  # (micro_batch, seq_len) int64
    targets: torch.Tensor  # (micro_batch, seq_len) int64
    sources: torch.Tensor  # (micro_batch,) int64: index into the mixture's sources (validation padding: one past)


def _micro_batches(rows: list[tuple[int, np.ndarray]], micro_batch: int) -> list[Batch]:
    batches = []
    for start in range(0, len(rows), micro_batch):
        chunk = rows[start : start + micro_batch]
        tokens = torch.from_numpy(np.stack([sequence for _, sequence in chunk]))
        batches.append(Batch(tokens[:, :-1], tokens[:, 1:], torch.tensor([s for s, _ in chunk], dtype=torch.int64)))
    return batches


def check_batches(mixture: Mixture, base: PhaseShape, world: int) -> None:
    """Every phase's global batch (and every batch of the ramp) splits into micro-batches on `world` ranks, or
    ValueError naming the phase or the ramp."""
    for phase, shape in zip(mixture.phases, mixture.shapes(base)):
        if shape.global_batch % (shape.micro_batch * world):
            raise ValueError(f"phase {phase.name!r}: global_batch {shape.global_batch} is not a multiple of micro_batch "
                             f"{shape.micro_batch} x ranks {world}")  # fmt: skip
    first = mixture.shapes(base)[0]
    for _, divisor in mixture.ramp_stages(base):
        if first.global_batch % divisor or (first.global_batch // divisor) % (first.micro_batch * world):
            raise ValueError(f"batch_ramp: a batch of 1/{divisor} of global_batch {first.global_batch} is not a whole "
                             f"multiple of micro_batch {first.micro_batch} x ranks {world}: start the ramp higher or "
                             "use a smaller micro_batch")  # fmt: skip


def check_resumable(state: dict, seed: int, seq_lens: list[int], shuffle_sequences: bool = False, ramp: list | None = None) -> None:
    """A checkpoint's data state continues only with the seed, the sequence lengths per phase, the order of sequences
    and the batch ramp it was written with."""
    saved = state.get("seq_lens", [state.get("seq_len")] * len(seq_lens))
    saved_ramp, ramp = state.get("batch_ramp", [[0, 1]]), [list(stage) for stage in ramp or [(0, 1)]]
    if saved_ramp != ramp:
        raise ValueError(f"the run was trained with the batch ramp's stages (first step, divisor) {saved_ramp}, not "
                         f"{ramp}: resume with its mixture's batch_ramp and global_batch, or start a new --out")  # fmt: skip
    if state.get("shuffle_sequences", False) != shuffle_sequences:
        raise ValueError(f"the run was trained with shuffle_sequences {state.get('shuffle_sequences', False)}, not "
                         f"{shuffle_sequences}: resume with its setting, or start a new --out")  # fmt: skip
    if state["seed"] != seed:
        raise ValueError(f"the run was trained with --seed {state['seed']}, not {seed}: resume with --seed {state['seed']}, "
                         "or start a new --out")  # fmt: skip
    if saved != seq_lens:
        raise ValueError(f"the run was trained with sequence lengths per phase {saved}, not {seq_lens}: resume with its "
                         "seq_len and phases, or start a new --out")  # fmt: skip


class MixtureLoader:
    """Yields each step's micro-batches for this rank; `state_dict()` is the same on every rank."""

    def __init__(self, mixture: Mixture, seq_len: int, global_batch: int, micro_batch: int, rank: int, world: int,
                 seed: int, eos_id: int, total_steps: int = 1, rope_theta: float = 10000.0,
                 shards: dict[str, list[ShardRows]] | None = None, shuffle_sequences: bool = False):  # fmt: skip
        base = PhaseShape(seq_len, global_batch, micro_batch, rope_theta)
        check_batches(mixture, base, world)
        self.shapes = mixture.shapes(base)
        if shuffle_sequences and len({shape.seq_len for shape in self.shapes}) > 1:
            raise ValueError("shuffle_sequences takes an epoch's windows of one length: the mixture's phases change the "
                             "sequence length; train them with shuffle_sequences false")  # fmt: skip
        self.shuffle_sequences = shuffle_sequences
        self.mixture, self.rank, self.world, self.seed = mixture, rank, world, seed
        self.names = mixture.source_names()
        shards = shards or read_sources(mixture)
        self.streams = [SourceStream(name, [(shard, shard.train) for shard in shards[name]], seed * 1000 + i, eos_id,
                                     shuffle_sequences=shuffle_sequences) for i, name in enumerate(self.names)]  # fmt: skip
        for stream in self.streams:
            if not stream.doc_ids:
                raise ValueError(f"source {stream.name!r}: no training document in {len(stream.files)} shard(s) matches "
                                 f"{mixture.sources[stream.name].where}")  # fmt: skip
        self.phase_start_steps = mixture.phase_start_steps(total_steps, base)
        self.ramp = mixture.ramp_stages(base)
        self.positions = [(0, 0)] * len(self.names)
        self.tokens = [0] * len(self.names)
        self.phase_counts = [0] * len(self.names)
        self.step, self.phase = 0, 0
        self.last_plan: list[tuple[int, int, int, int]] = []

    def phase_at(self, step: int) -> int:
        return max(p for p, start in enumerate(self.phase_start_steps) if start <= step or p == 0)

    def shape_at(self, step: int) -> PhaseShape:
        """Step `step`'s shape: its phase's, with the batch ramp's global batch."""
        return self.mixture.step_shape(self.shapes[self.phase_at(step)], step, self.ramp)

    @property
    def shape(self) -> PhaseShape:
        """The shape of the next step."""
        return self.shape_at(self.step)

    @property
    def last_shape(self) -> PhaseShape:
        """The shape of the step drawn last."""
        return self.shape_at(self.step - 1)

    @property
    def grad_accum(self) -> int:
        return self.shape.global_batch // (self.shape.micro_batch * self.world)

    def plan_step(self) -> list[tuple[int, int, int, int]]:
        """(source, epoch, offset, length) of each sequence of the next global batch; advances the state."""
        phase = self.phase_at(self.step)
        if phase != self.phase:
            self.phase, self.phase_counts = phase, [0] * len(self.names)
        length = self.shapes[phase].seq_len
        plan = []
        for source in choose_sources(self.phase_counts, self.mixture.weights(phase), self.shape.global_batch):
            epoch, offset = self.streams[source].fit(*self.positions[source], length)
            plan.append((source, epoch, offset, length))
            self.positions[source] = (epoch, offset + length)
            self.tokens[source] += length
        self.step += 1
        self.last_plan = plan
        return plan

    def next_step(self) -> list[Batch]:
        plan = self.plan_step()
        share = len(plan) // self.world
        mine = plan[self.rank * share : (self.rank + 1) * share]
        rows = [(source, self.streams[source].sequence(epoch, offset, length)) for source, epoch, offset, length in mine]
        return _micro_batches(rows, self.shapes[self.phase].micro_batch)

    def last_step_documents(self) -> list[dict]:
        """Lineage of the last global batch: per sequence its source and document ids (no token reads needed)."""
        return [{"source": self.names[s], "doc_ids": self.streams[s].doc_ids_of(e, o, n)} for s, e, o, n in self.last_plan]

    def skip(self, documents: dict[str, list[str]]) -> None:
        """Never train on these documents again (a rewind's offending documents), by source."""
        for name, stream in zip(self.names, self.streams):
            stream.skip(documents.get(name, []))

    def tokens_per_source(self) -> dict[str, int]:
        return dict(zip(self.names, self.tokens))

    def state_dict(self) -> dict:
        return {"seed": self.seed, "seq_lens": [shape.seq_len for shape in self.shapes], "step": self.step, "phase": self.phase,
                "shuffle_sequences": self.shuffle_sequences, "batch_ramp": [list(stage) for stage in self.ramp],
                "positions": {n: list(p) for n, p in zip(self.names, self.positions)},
                "tokens": dict(zip(self.names, self.tokens)),
                "phase_sequences": dict(zip(self.names, self.phase_counts)),
                "skipped": {s.name: sorted(s.skipped) for s in self.streams if s.skipped}}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        check_resumable(state, self.seed, [shape.seq_len for shape in self.shapes], self.shuffle_sequences, self.ramp)
        self.skip(state.get("skipped", {}))
        if "positions" in state:
            self.positions = [tuple(state["positions"].get(name, (0, 0))) for name in self.names]
            self.tokens = [state["tokens"].get(name, 0) for name in self.names]
        else:  # a state from before per-phase lengths counted sequences of one length, never crossing an epoch's end
            drawn = [state["sequences"].get(name, 0) for name in self.names]
            per_epoch = [(stream.epoch_tokens - 1) // state["seq_len"] for stream in self.streams]
            self.positions = [(k // n, k % n * state["seq_len"]) for k, n in zip(drawn, per_epoch)]
            self.tokens = [k * state["seq_len"] for k in drawn]
        # a state from before curriculum phases had one phase: its step and phase counts follow from the sequences
        self.step = state.get("step", sum(self.tokens) // self.shapes[0].tokens_per_step)
        self.phase = state["phase"]
        self.phase_counts = [state.get("phase_sequences", state.get("sequences", {})).get(name, 0) for name in self.names]


def validation_selections(mixture: Mixture, shards: dict[str, list[ShardRows]]) -> dict[str, list[tuple[ShardRows, np.ndarray]]]:
    """Per source, the held-out rows of its shards (unless it says `validation: named`) and every row of the shards it
    names in `validation_paths`."""
    named = read_sources(mixture, mixture.validation_files)
    return {name: [(shard, shard.held_out) for shard in shards[name] if mixture.sources[name].validation == "both"]
            + [(shard, np.union1d(shard.train, shard.held_out)) for shard in named[name]] for name in mixture.source_names()}  # fmt: skip


def validation_digest(selections: dict[str, list[tuple[ShardRows, np.ndarray]]]) -> dict[str, str]:
    """Per source, a digest of its held-out document ids: a resume checks it is scored on the same slice."""
    return {name: hashlib.sha256("\n".join(sorted(id_ for shard, rows in chosen for id_ in shard.meta["id"].take(rows).to_pylist()))
                                 .encode()).hexdigest()[:16] for name, chosen in selections.items()}  # fmt: skip


class ValidationSet:
    """The held-out documents of every source (its `where` applied, so a bucket is scored on its own), packed in an
    order fixed for every run, so runs with other seeds, other mixtures or a resume are scored on the same text."""

    def __init__(self, mixture: Mixture, eos_id: int, sequences: int, shards: dict[str, list[ShardRows]] | None = None):
        """`shards`: the sources' shards as the loader read them (read here when not given)."""
        self.names, self.sequences = mixture.source_names(), sequences
        self._batches: dict[tuple[int, int, int, int], list[Batch]] = {}
        selections = validation_selections(mixture, shards or read_sources(mixture))
        self.streams = {name: SourceStream(name, selections[name], VALIDATION_SEED, eos_id) for name in self.names}
        self.fingerprint = validation_digest(selections)

    def count(self, name: str, seq_len: int) -> int:
        """Sequences scored for a source: up to `sequences`, as many as its held-out tokens fill."""
        return min(self.sequences, max(0, (self.streams[name].epoch_tokens - 1) // seq_len))

    def missing(self, seq_len: int) -> list[str]:
        """Sources with less held out than one sequence."""
        return [name for name in self.names if not self.count(name, seq_len)]

    def batches(self, seq_len: int, micro_batch: int, rank: int, world: int) -> list[Batch]:
        """This rank's micro-batches of up to `sequences` sequences per source, made once per shape; every rank gets
        as many (padding rows carry the source index one past the last, which scoring drops)."""
        key = (seq_len, micro_batch, rank, world)
        if key not in self._batches:
            self._batches[key] = self._pack(seq_len, micro_batch, rank, world)
        return self._batches[key]

    def _pack(self, seq_len: int, micro_batch: int, rank: int, world: int) -> list[Batch]:
        rows = []
        for index, name in enumerate(self.names):
            rows += [(index, self.streams[name].sequence(0, k * seq_len, seq_len)) for k in range(self.count(name, seq_len))]
        if not rows:
            return []
        per_rank = -(-len(rows) // world)
        rows += [(len(self.names), rows[0][1])] * (per_rank * world - len(rows))
        return _micro_batches(rows[rank * per_rank : (rank + 1) * per_rank], micro_batch)
