"""The corpus-wide pass of a duplicate stage, as files and small tasks: no worker ever holds the corpus.

    keys      per shard      candidate keys (band, key, node) -> keys/p<partition>/s<shard>     shuffle by key
    buckets   per partition  documents sharing a key -> pairs; union-find inside the partition
    verify    per shard, x2  (optional) attach each side's shingle set, keep pairs at Jaccard >= threshold
    large/small-star rounds  connected components across partitions (Kiveris et al., "Connected Components in
                             MapReduce and Beyond", 2014): edges partitioned by node, alternated until every
                             component is a star around its smallest node
    assign    per partition  root and size of every clustered node -> assign/s<shard>
Then each shard's filter task reads only its own assignments (`attach_clusters`).

This module owns the pass: `run_pass` is its step order, `PassContext.sized` its partition count. The runner only
hands it a fan-out callback that runs one step's tasks (on Ray) and records them in the manifest.

A document is a node: an int64 of (priority << 44 | shard << 24 | row), so the smallest node of a component is
the member the stage wants to keep (first seen, longest, or best quality) and the node says where its row lives.
Every task writes its files atomically under fixed names and the driver records it in the manifest only when it
returned, so a killed pass resumes at the task it stopped at without duplicating output. Memory per task is
bounded by its partition (`partition_records` keys each), not by the corpus.
"""

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import fsspec
import numpy as np
import pyarrow as pa

from curation.io import read_parquet, write_parquet_atomic
from curation.recipe import Recipe
from curation.worker_stages import worker_stage
from filters.duplicates import DuplicateFilter

ROW_BITS, SHARD_BITS = 24, 20  # with PRIORITY_BITS (19): 63 bits, so node ids stay positive int64
MAX_ROUNDS = 64
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_EDGES = pa.schema([("u", pa.int64()), ("v", pa.int64())])  # u > v


def node_ids(shard: int, rows: np.ndarray, priority: np.ndarray) -> np.ndarray:
    if shard >= 1 << SHARD_BITS or (len(rows) and rows.max() >= 1 << ROW_BITS):
        raise ValueError(f"shard {shard}: dedup supports {1 << SHARD_BITS} shards of {1 << ROW_BITS} rows at most")
    return (priority.astype(np.int64) << (ROW_BITS + SHARD_BITS)) | (np.int64(shard) << ROW_BITS) | rows.astype(np.int64)


def node_shard(nodes: np.ndarray) -> np.ndarray:
    return (nodes >> ROW_BITS) & ((1 << SHARD_BITS) - 1)


def node_row(nodes: np.ndarray) -> np.ndarray:
    return nodes & ((1 << ROW_BITS) - 1)


def partition_of(values: np.ndarray, partitions: int) -> np.ndarray:
    mixed = (values.astype(np.uint64) * _GOLDEN) >> np.uint64(32)
    return (mixed % np.uint64(partitions)).astype(np.int64)


@dataclass
class PassContext:
    """What every task of one stage's pass needs; pickled to the Ray workers."""

    recipe: Recipe
    stage_index: int  # into recipe.stages
    stage_hash: str
    work: str  # OUT/work/<stage_dir>, with the protocol prefix
    parts: dict[int, str]  # shard -> the previous stage's part
    partitions: int

    @classmethod
    def sized(cls, recipe: Recipe, stage_index: int, stage_hash: str, work: str, parts: dict[int, str], docs: int,
              partitions: int | None = None) -> "PassContext":  # fmt: skip
        """A pass over `docs` documents, with enough partitions that each holds about `partition_records` keys (a
        resumed pass passes the count its first attempt chose, so its files keep their layout)."""
        if partitions is None:
            stage = recipe.build(stage_index)
            keys = docs * stage.keys_per_document
            partitions = max(1, -(-keys // stage.params.partition_records))
        return cls(recipe, stage_index, stage_hash, work, parts, partitions)

    @property
    def fs(self):
        return fsspec.core.url_to_fs(self.work)[0]

    def path(self, *parts: str) -> str:
        return "/".join([self.work.rstrip("/"), *parts])


def stage_of(ctx: PassContext) -> DuplicateFilter:
    return worker_stage(ctx.recipe, ctx.stage_index, ctx.stage_hash)


def _read_folder(ctx: PassContext, folder: str, schema: pa.Schema | None = None) -> pa.Table:
    fs, path = ctx.fs, ctx.path(folder)
    files = sorted(fs.find(path)) if fs.exists(path) else []
    tables = [read_parquet(fs, file) for file in files if file.endswith(".parquet")]
    if not tables:
        return (schema or _EDGES).empty_table()
    return pa.concat_tables(tables)


def _write(ctx: PassContext, relative: str, table: pa.Table) -> None:
    if table.num_rows:
        fs, path = ctx.fs, ctx.path(relative)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        write_parquet_atomic(fs, path, table)


def _write_split(ctx: PassContext, folder: str, name: str, table: pa.Table, destination: np.ndarray) -> None:
    """Rows of `table` to `folder<d>/name` for each destination d."""
    if not len(destination):
        return
    order = np.argsort(destination, kind="stable")
    destination = destination[order]
    table = table.take(order)
    bounds = np.flatnonzero(np.diff(destination)) + 1
    for start, end in zip(np.r_[0, bounds], np.r_[bounds, len(destination)]):
        _write(ctx, f"{folder}{destination[start]:05d}/{name}.parquet", table.slice(start, end - start))


def _edges(u: np.ndarray, v: np.ndarray) -> pa.Table:
    return pa.table({"u": pa.array(u, pa.int64()), "v": pa.array(v, pa.int64())}, schema=_EDGES)


def _unique_edges(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    if not table.num_rows:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    pairs = np.unique(np.stack([table["u"].to_numpy(), table["v"].to_numpy()], axis=1), axis=0)
    return pairs[:, 0], pairs[:, 1]


def _write_edges_both_ends(ctx: PassContext, folder: str, name: str, u: np.ndarray, v: np.ndarray) -> None:
    """Each edge to the partition of each endpoint, for a large-star step that needs both directions."""
    both = _edges(np.r_[u, u], np.r_[v, v])
    destination = np.r_[partition_of(u, ctx.partitions), partition_of(v, ctx.partitions)]
    once = np.r_[np.ones(len(u), bool), partition_of(u, ctx.partitions) != partition_of(v, ctx.partitions)]
    _write_split(ctx, folder, name, both.filter(pa.array(once)), destination[once])


def keys_step(ctx: PassContext, shard: int) -> dict:
    stage = stage_of(ctx)
    table = read_parquet(ctx.fs, ctx.parts[shard])
    found = stage.candidate_keys(table)
    nodes = node_ids(shard, found.rows, stage.priority(table)[found.rows])
    keys = pa.table({"band": pa.array(found.bands, pa.int32()), "key": pa.array(found.keys, pa.uint64()), "node": nodes})
    mixed = found.keys ^ (found.bands.astype(np.uint64) * _GOLDEN)
    _write_split(ctx, "keys/p", f"s{shard:05d}", keys, partition_of(mixed, ctx.partitions))
    if found.shingles is not None:
        shingles = pa.table({"shingles": pa.array(found.shingles, pa.list_(pa.uint32()))})
        _write(ctx, f"shingles/s{shard:05d}.parquet", shingles)
    return {"docs": table.num_rows, "keys": len(nodes), **found.stats}


def local_components(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same components as the edges (u, v), as edges (member, smallest member)."""
    from curation.dedup_kernels import union_find

    nodes, inverse = np.unique(np.r_[u, v], return_inverse=True)
    roots = union_find(inverse[: len(u)], inverse[len(u) :], len(nodes))
    member = np.flatnonzero(roots != np.arange(len(nodes)))
    return nodes[member], nodes[roots[member]]


def buckets_step(ctx: PassContext, partition: int) -> dict:
    keys = _read_folder(ctx, f"keys/p{partition:05d}", pa.schema([("band", pa.int32()), ("key", pa.uint64()), ("node", pa.int64())]))
    band, key, node = (keys[c].to_numpy() for c in ("band", "key", "node"))
    order = np.lexsort((node, key, band))
    band, key, node = band[order], key[order], node[order]
    new_bucket = np.r_[True, (band[1:] != band[:-1]) | (key[1:] != key[:-1])] if len(node) else np.zeros(0, bool)
    first = np.maximum.accumulate(np.where(new_bucket, np.arange(len(node)), 0))
    member = ~new_bucket & (node != node[first])
    u, v = _unique_edges(_edges(node[member], node[first][member]))
    stats = {"keys": len(node), "buckets": int(new_bucket.sum()), "candidate_pairs": len(u)}
    if stage_of(ctx).verify_threshold is not None:
        _write_split(ctx, "pairs/s", f"p{partition:05d}", _edges(u, v), node_shard(u))
    else:
        u, v = local_components(u, v)
        _write_edges_both_ends(ctx, "cc/r001-large/q", f"p{partition:05d}", u, v)
    return stats


def _shingles(ctx: PassContext, shard: int) -> list:
    return read_parquet(ctx.fs, ctx.path(f"shingles/s{shard:05d}.parquet"))["shingles"]


def verify_first_step(ctx: PassContext, shard: int) -> dict:
    """Attach the shingle set of each pair's first document (which lives in this shard), sent on to the second's."""
    u, v = _unique_edges(_read_folder(ctx, f"pairs/s{shard:05d}"))
    if not len(u):
        return {"pairs": 0}
    shingles = _shingles(ctx, shard).take(pa.array(node_row(u)))
    table = pa.table({"u": u, "v": v, "u_shingles": shingles})
    _write_split(ctx, "pairs2/s", f"s{shard:05d}", table, node_shard(v))
    return {"pairs": len(u)}


def verify_second_step(ctx: PassContext, shard: int) -> dict:
    """True Jaccard of each pair whose second document lives in this shard; pairs under threshold are dropped."""
    from curation.dedup_kernels import jaccard

    pairs = _read_folder(ctx, f"pairs2/s{shard:05d}", pa.schema([("u", pa.int64()), ("v", pa.int64()), ("u_shingles", pa.list_(pa.uint32()))]))
    v_shingles = _shingles(ctx, shard).take(pa.array(node_row(pairs["v"].to_numpy()))) if pairs.num_rows else pa.array([], pa.list_(pa.uint32()))
    left, right = pairs["u_shingles"].combine_chunks(), pa.chunked_array([v_shingles]).combine_chunks()
    similarity = jaccard(
        left.values.to_numpy(), left.offsets.to_numpy(), right.values.to_numpy(), right.offsets.to_numpy()
    ) if pairs.num_rows else np.empty(0)  # fmt: skip
    accepted = similarity >= stage_of(ctx).verify_threshold
    u, v = pairs["u"].to_numpy()[accepted], pairs["v"].to_numpy()[accepted]
    _write_edges_both_ends(ctx, "cc/r001-large/q", f"s{shard:05d}", u, v)
    histogram = np.histogram(similarity, bins=10, range=(0, 1))[0]
    return {
        "pairs": len(similarity),
        "accepted": int(accepted.sum()),
        "rejected": int((~accepted).sum()),
        "jaccard": {f"{i / 10:.1f}-{(i + 1) / 10:.1f}": int(n) for i, n in enumerate(histogram) if n},
    }


def _directed(ctx: PassContext, folder: str, partition: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Edges seen from the nodes of this partition, grouped: (source, target) sorted, group starts, group sizes."""
    u, v = _unique_edges(_read_folder(ctx, folder))
    source, target = np.r_[u, v], np.r_[v, u]
    mine = partition_of(source, ctx.partitions) == partition
    source, target = source[mine], target[mine]
    order = np.lexsort((target, source))
    source, target = source[order], target[order]
    _, starts, counts = np.unique(source, return_index=True, return_counts=True)
    return source, target, starts, counts


def large_star_step(ctx: PassContext, round_: int, partition: int) -> dict:
    """Each node links its larger neighbours to the smallest node of its neighbourhood; also reports whether the
    input already is a forest of stars (then the pass is done)."""
    source, target, starts, counts = _directed(ctx, f"cc/r{round_:03d}-large/q{partition:05d}", partition)
    if not len(source):
        return {"edges": 0, "converged": True}
    smallest = np.repeat(np.minimum(source[starts], np.minimum.reduceat(target, starts)), counts)
    smaller = np.add.reduceat((target < source).astype(np.int64), starts)
    larger = np.add.reduceat((target > source).astype(np.int64), starts)
    converged = not np.any((smaller > 1) | ((smaller == 1) & (larger > 0)))
    keep = target > source
    u, v = target[keep], smallest[keep]
    _write_split(ctx, f"cc/r{round_:03d}-small/q", f"q{partition:05d}", _edges(u, v), partition_of(u, ctx.partitions))
    return {"edges": len(source), "converged": bool(converged)}


def small_star_step(ctx: PassContext, round_: int, partition: int) -> dict:
    """Each node and its smaller neighbours all link to the smallest of them."""
    u, v = _unique_edges(_read_folder(ctx, f"cc/r{round_:03d}-small/q{partition:05d}"))
    if not len(u):
        return {"edges": 0}
    _, starts, counts = np.unique(u, return_index=True, return_counts=True)  # u is sorted by _unique_edges
    smallest = np.repeat(np.minimum.reduceat(v, starts), counts)
    others = v != smallest
    new_u = np.r_[u[starts], v[others]]
    new_v = np.r_[smallest[starts], smallest[others]]
    _write_edges_both_ends(ctx, f"cc/r{round_ + 1:03d}-large/q", f"q{partition:05d}", new_u, new_v)
    return {"edges": len(u)}


def assign_step(ctx: PassContext, round_: int, partition: int) -> dict:
    """Stars are final: each root in this partition names itself and its leaves, with the cluster size."""
    source, target, starts, counts = _directed(ctx, f"cc/r{round_:03d}-large/q{partition:05d}", partition)
    is_root = np.repeat(source[starts] < target[starts], counts)  # a root's neighbours are all larger
    roots, leaves = source[is_root], target[is_root]
    root_starts = np.flatnonzero(np.r_[True, roots[1:] != roots[:-1]]) if len(roots) else np.empty(0, np.int64)
    sizes = np.diff(np.r_[root_starts, len(roots)]) + 1
    nodes = np.r_[roots[root_starts], leaves]
    clusters = np.r_[roots[root_starts], roots]
    cluster_sizes = np.r_[sizes, np.repeat(sizes, sizes - 1)]
    table = pa.table({"node": nodes, "cluster": clusters, "size": pa.array(cluster_sizes, pa.int32())})
    _write_split(ctx, "assign/s", f"q{partition:05d}", table, node_shard(nodes))
    return {"clusters": len(root_starts), "duplicates": len(leaves)}


def attach_clusters(ctx: PassContext, shard: int, table: pa.Table) -> pa.Table:
    """The shard's rows with `dup_cluster` (the kept member's node), `dup_cluster_size` and `dup_keep`."""
    assigned = _read_folder(ctx, f"assign/s{shard:05d}", pa.schema([("node", pa.int64()), ("cluster", pa.int64()), ("size", pa.int32())]))
    nodes = assigned["node"].to_numpy()
    rows = node_row(nodes)
    cluster = np.full(table.num_rows, -1, dtype=np.int64)
    size = np.ones(table.num_rows, dtype=np.int32)
    cluster[rows] = assigned["cluster"].to_numpy()
    size[rows] = assigned["size"].to_numpy()
    keep = np.ones(table.num_rows, dtype=bool)
    keep[rows] = nodes == cluster[rows]
    columns = {
        "dup_cluster": pa.array(cluster, pa.int64(), mask=cluster < 0),
        "dup_cluster_size": pa.array(size, pa.int32()),
        "dup_keep": pa.array(keep),
    }
    for name, values in columns.items():
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, values)
        else:
            table = table.append_column(name, values)
    return table


STEPS = {
    "keys": keys_step,
    "buckets": buckets_step,
    "verify-first": verify_first_step,
    "verify-second": verify_second_step,
    "large": large_star_step,
    "small": small_star_step,
    "assign": assign_step,
}


class PassFailed(RuntimeError):
    """The pass stopped; `rerun_fixes` when the machine failed under a task (a lost worker, a full disk), not the data."""

    def __init__(self, message: str, rerun_fixes: bool = False):
        super().__init__(message)
        self.rerun_fixes = rerun_fixes


# fan_out(name, step, ids, *args): run STEPS[step](ctx, *args, id) for every id not done yet under `name`, return
# {id: stats} for all of them; raises PassFailed when a task fails
FanOut = Callable[..., dict]


def run_task(ctx: PassContext, step: str, *args) -> dict:
    """One task of the pass (what the runner's fan-out runs on a worker), with its seconds and, on Linux, the
    worker's RSS at the start and its peak during the task (what the pass's memory formula predicts)."""
    started, start_rss = time.perf_counter(), _reset_peak_rss()
    stats = STEPS[step](ctx, *args)
    memory = {} if start_rss is None else {"rss_start_mib": start_rss, "rss_peak_mib": max(start_rss, _peak_rss_mib())}
    return {**stats, "seconds": round(time.perf_counter() - started, 4), **memory}


def _reset_peak_rss() -> float | None:
    """This process's RSS in MiB after resetting its high-water mark (Linux's clear_refs "5"); None where the
    kernel does not offer it, so the task's peak is never a figure left over from an earlier task."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        return _status_mib("VmRSS")
    except (OSError, ValueError):
        return None


def _peak_rss_mib() -> float:
    """The high-water mark, which the kernel updates lazily (its counters are per-CPU, so it can read below an
    RSS read a moment earlier)."""
    return _status_mib("VmHWM")


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    raise ValueError(f"/proc/self/status has no {field}")


def run_pass(ctx: PassContext, fan_out: FanOut) -> None:
    """Every step of the pass, in order; each step's tasks run in parallel and depend only on earlier steps."""
    shards: Iterable[int] = sorted(ctx.parts)
    partitions = range(ctx.partitions)
    fan_out("keys", "keys", shards)
    fan_out("buckets", "buckets", partitions)
    if stage_of(ctx).verify_threshold is not None:
        fan_out("verify-first", "verify-first", shards)
        fan_out("verify-second", "verify-second", shards)
    for round_ in range(1, MAX_ROUNDS + 1):
        large = fan_out(f"r{round_:03d}-large", "large", partitions, round_)
        if all(stats["converged"] for stats in large.values()):
            fan_out("assign", "assign", partitions, round_)
            return
        fan_out(f"r{round_:03d}-small", "small", partitions, round_)
    raise PassFailed(f"connected components did not converge in {MAX_ROUNDS} rounds")
