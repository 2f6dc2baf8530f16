"""MinHash dedup: signature throughput against datasketch, and peak memory of the clustering step as the corpus grows.

1. Signatures: the same documents (real web text from ../shared/data/quality when present, else generated pairs),
   normalized once; ours from the normalized text (shingling included), datasketch's `MinHash.bulk` from shingle
   byte strings prepared outside its timing. Both schemes; the signatures are checked equal.
2. Clustering (buckets -> connected components -> assign) on synthetic band keys for 20k, 100k and 400k documents,
   a tenth of them in planted chains of 2-4 (each shares a band with the next). Every task runs in a fresh process and reports its
   peak RSS, so the figure is one worker's memory. Baseline: the same steps in one partition (one task holds every
   key, as a single-machine clustering does).

    python benchmarks/dedup.py [--scales 20000 100000 400000] [--partition-records 500000]
"""

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from curation import dedup  # noqa: E402
from curation.recipe import parse_recipe  # noqa: E402
from filters.minhash import MinHasher  # noqa: E402
from filters.normalization import normalize_batch, normalized_bytes  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "quality" / "labelled_web_text.jsonl"
BANDS = 14


def documents() -> tuple[list[str], str]:
    if SHARED.exists():
        texts = [json.loads(line)["text"] for line in SHARED.read_text().splitlines() if line.strip()]
        return texts * 8, f"{SHARED.name} (281 real web documents) x 8"
    from curation.sources.near_duplicates import near_duplicate_pairs

    pairs = near_duplicate_pairs(1000, 0.3, 1.0)
    return [text for pair in pairs for text in (pair.original, pair.copy)], "2,000 generated documents"


def signatures_benchmark() -> None:
    from datasketch import MinHash

    texts, origin = documents()
    normalized = normalize_batch(texts, "fineweb")
    shingles = []
    for text in normalized:
        words = text.split(" ") if text else []
        shingles.append([" ".join(words[i : i + 5]).encode() for i in range(len(words) - 4)] or ([text.encode()] if text else []))
    total = sum(len(s) for s in shingles)
    print(f"## Signatures: {len(texts):,} documents, {total:,} word 5-gram shingles, 112 permutations ({origin})\n")
    print("| scheme | datasketch MinHash.bulk | ours | ours incl. normalization | speed-up | equal |")
    print("|---|---|---|---|---|---|")
    buffer, offsets = normalized_bytes(texts, "fineweb")
    for scheme in ("affine32", "legacy"):
        hasher = MinHasher(112, seed=1, scheme=scheme)
        hasher.signatures(*normalized_bytes(texts[:10], "fineweb"))  # compile outside the timing
        started = time.perf_counter()
        ours, _, _ = hasher.signatures(buffer, offsets)
        ours_s = time.perf_counter() - started
        started = time.perf_counter()
        hasher.signatures(*normalized_bytes(texts, "fineweb"))
        with_normalization_s = time.perf_counter() - started
        started = time.perf_counter()
        reference = MinHash.bulk(shingles, num_perm=112, seed=1, scheme=scheme)
        reference_s = time.perf_counter() - started
        equal = all(np.array_equal(m.hashvalues.astype(np.uint64), s.astype(np.uint64)) for m, s in zip(reference, ours))
        print(f"| {scheme} | {total / reference_s:,.0f} shingles/s ({len(texts) / reference_s:,.0f} docs/s) "
              f"| {total / ours_s:,.0f} shingles/s ({len(texts) / ours_s:,.0f} docs/s) "
              f"| {len(texts) / with_normalization_s:,.0f} docs/s | **{reference_s / ours_s:.1f}x** | {equal} |")  # fmt: skip


def planted_keys(docs: int, seed: int = 0) -> tuple[np.ndarray, int]:
    """Random band keys (documents x bands), a tenth of the documents in chained clusters of 2-4: linked only
    through other members, in different bands, so components must be joined across partitions."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**63, size=(docs, BANDS), dtype=np.uint64)
    order, start, planted = rng.permutation(docs), 0, 0
    while start < docs // 10:
        members = order[start : start + int(rng.integers(2, 5))]
        for previous, member in zip(members, members[1:]):  # a chain: each shares a (random) band with the next
            band = int(rng.integers(0, BANDS))
            keys[member, band] = keys[previous, band]
        start, planted = start + len(members), planted + 1
    return keys, planted


def write_keys(ctx: dedup.PassContext, keys: np.ndarray, shards: int) -> None:
    """What the `keys` step writes, shard by shard."""
    import pyarrow as pa

    per_shard = len(keys) // shards
    for shard in range(shards):
        rows = np.arange(per_shard)
        nodes = np.repeat(dedup.node_ids(shard, rows, np.zeros(per_shard, np.int64)), BANDS)
        bands = np.tile(np.arange(BANDS, dtype=np.int32), per_shard)
        flat = keys[shard * per_shard : (shard + 1) * per_shard].reshape(-1)
        table = pa.table({"band": bands, "key": pa.array(flat, pa.uint64()), "node": nodes})
        mixed = flat ^ (bands.astype(np.uint64) * dedup._GOLDEN)
        dedup._write_split(ctx, "keys/p", f"s{shard:05d}", table, dedup.partition_of(mixed, ctx.partitions))


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def task_in_fresh_process(ctx: dedup.PassContext, step: str, *args) -> tuple[dict, int, int]:
    """(stats, RSS before the task, peak RSS during it): the kernel's high-water mark is reset before the task
    (Linux clear_refs 5), so imports do not count as the task's memory."""
    dedup.stage_of(ctx)  # build the stage and load the compiled loops, as a worker has before its next task
    dedup.local_components(np.array([2]), np.array([1]))
    before = _status_kib("VmRSS") * 1024
    Path("/proc/self/clear_refs").write_text("5")
    stats = dedup.STEPS[step](ctx, *args)
    return stats, before, _status_kib("VmHWM") * 1024


def clustering(ctx: dedup.PassContext, pool: ProcessPoolExecutor) -> tuple[float, int, int, int, int]:
    """Seconds, peak RSS of any task, its growth during the task, rounds, clusters: the pass's steps after `keys`,
    as the runner orders them."""
    started, peak, growth = time.perf_counter(), 0, 0

    def step(kind: str, *args) -> list[dict]:
        nonlocal peak, growth
        futures = [pool.submit(task_in_fresh_process, ctx, kind, *args, q) for q in range(ctx.partitions)]
        results = [f.result() for f in futures]
        peak = max([peak] + [high for _, _, high in results])
        growth = max([growth] + [high - before for _, before, high in results])
        return [stats for stats, _, _ in results]

    step("buckets")
    for round_ in range(1, dedup.MAX_ROUNDS + 1):
        if all(stats["converged"] for stats in step("large", round_)):
            clusters = sum(stats["clusters"] for stats in step("assign", round_))
            return time.perf_counter() - started, peak, growth, round_, clusters
        step("small", round_)
    raise RuntimeError("did not converge")


def clustering_benchmark(scales: list[int], partition_records: int) -> None:
    recipe = parse_recipe({"name": "bench", "stages": [{"stage": "minhash"}]}, "bench")
    with ProcessPoolExecutor(max_workers=2, max_tasks_per_child=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        print(f"\n## Clustering (buckets + components + assign), {partition_records:,} keys per partition\n")
        print("| documents | band keys | layout | partitions | rounds | clusters found / planted | seconds (a fresh process per task) "
              "| peak RSS of one task | growth during the task |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|")
        for docs in scales:
            keys, planted = planted_keys(docs)
            for layout, partitions in (("partitioned", max(1, -(-docs * BANDS // partition_records))), ("one partition (baseline)", 1)):
                with tempfile.TemporaryDirectory(prefix="dedup-bench-") as work:
                    ctx = dedup.PassContext(recipe, 0, "bench", work, {}, partitions)
                    write_keys(ctx, keys, 8)
                    seconds, peak, growth, rounds, clusters = clustering(ctx, pool)
                print(f"| {docs:,} | {docs * BANDS:,} | {layout} | {partitions} | {rounds} | {clusters:,} / {planted:,} "
                      f"| {seconds:.1f} | {peak / 2**20:.0f} MiB | {growth / 2**20:.0f} MiB |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", type=int, nargs="+", default=[20_000, 100_000, 400_000])
    parser.add_argument("--partition-records", type=int, default=500_000)
    parser.add_argument("--skip-signatures", action="store_true")
    args = parser.parse_args()
    if not args.skip_signatures:
        signatures_benchmark()
    clustering_benchmark(args.scales, args.partition_records)


if __name__ == "__main__":
    main()
