"""MinHash dedup, ours vs datatrove's, on the same documents with the same workers: seconds and what each removes.

    python benchmarks/dedup_vs_datatrove.py [--pairs 5000] [--workers 2] [--anchor-python .venv-anchor/bin/python]

Documents: `--pairs` generated near-duplicate pairs (curation/sources/near_duplicates.py) at a measured word 5-gram
Jaccard drawn from [0.3, 1], shuffled into 4 files (Parquet for us, JSONL for datatrove).
Baseline: datatrove 0.10's MinhashDedupSignature -> Buckets -> Cluster -> Filter with FineWeb's config (14 x 8,
5-grams, 64-bit hashes), under the anchor venv (`datatrove_minhash.py`). Ours: `minhash` with the same 14 x 8 on
a fresh local Ray cluster each (its start and the workers' imports are in our wall time, as datatrove's process
starts are in its), without and with `verify`. A pair counts as found when one of its documents is removed (pairs
share nothing, so no removal joins two pairs).
"""

import argparse
import glob
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curation.sources.near_duplicates import near_duplicate_pairs  # noqa: E402


def write_documents(folder: Path, pairs) -> None:
    docs = [(f"p{i}{side}", text) for i, pair in enumerate(pairs) for side, text in (("a", pair.original), ("b", pair.copy))]
    random.Random(0).shuffle(docs)
    (folder / "jsonl").mkdir()
    for shard in range(4):
        part = docs[shard::4]
        pq.write_table(pa.table({"id": [d for d, _ in part], "text": [t for _, t in part]}), folder / f"in-{shard}.parquet")
        with open(folder / "jsonl" / f"in-{shard}.jsonl", "w") as handle:
            handle.writelines(json.dumps({"id": d, "text": t}) + "\n" for d, t in part)


def run_ours(folder: Path, workers: int) -> list[dict]:
    """Each configuration on a fresh local Ray cluster, its start counted, as datatrove's processes are."""
    import ray

    from curation import runner, stats
    from curation.recipe import parse_recipe

    results = []
    for verify in (False, True):
        recipe = parse_recipe({"name": "bench", "source": {"kind": "parquet"}, "stages": [{"stage": "minhash", "params": {"verify": verify}}]}, "bench")
        output = folder / f"ours-verify-{verify}"
        started = time.perf_counter()
        ray.init(num_cpus=workers, include_dashboard=False, object_store_memory=200 * 1024**2, logging_level="WARNING")
        ray_start = time.perf_counter() - started
        assert not runner.run(recipe, sorted(glob.glob(f"{folder}/in-*.parquet")), str(output), "bench", keep_removed=True).failures
        wall = time.perf_counter() - started
        ray.shutdown()
        removed = pd.concat([pq.read_table(p, columns=["id"]).to_pandas() for p in (output / "removed").rglob("*.parquet")])
        steps = stats.load_passes(str(output))["01_minhash"]
        shard_seconds = stats.load(str(output)).query("stage == '01_minhash'").seconds.sum()
        results.append({
            "system": f"ours, 14x8{', verify >= 0.8' if verify else ''}", "wall": wall, "removed": set(removed["id"]),
            "detail": f"Ray start {ray_start:.1f} s; in tasks: keys {steps['keys']['seconds']:.1f} s, filter {shard_seconds:.1f} s",
        })  # fmt: skip
    return results


def run_datatrove(folder: Path, workers: int, anchor_python: str) -> dict:
    started = time.perf_counter()
    done = subprocess.run(
        [anchor_python, str(ROOT / "benchmarks" / "datatrove_minhash.py"), str(folder / "jsonl"), str(folder / "datatrove"), "--workers", str(workers)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall = time.perf_counter() - started
    report = json.loads(done.stdout.strip().splitlines()[-1])
    detail = ", ".join(f"{name} {seconds} s" for name, seconds in report["seconds"].items())
    return {"system": "datatrove 0.10 MinHash, 14x8", "wall": wall, "removed": set(report["removed"]), "detail": detail}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--anchor-python", default=str(ROOT / ".venv-anchor" / "bin" / "python"))
    args = parser.parse_args()
    pairs = near_duplicate_pairs(args.pairs, 0.3, 1.0, seed=2)
    with tempfile.TemporaryDirectory(prefix="dedup-vs-datatrove-") as work:
        folder = Path(work)
        write_documents(folder, pairs)
        results = [run_datatrove(folder, args.workers, args.anchor_python)] + run_ours(folder, args.workers)
    jaccard = pd.Series([pair.jaccard for pair in pairs])
    print(f"## MinHash dedup on {2 * len(pairs):,} documents ({len(pairs):,} pairs at Jaccard 0.3-1), {args.workers} workers\n")
    print("| system | wall s | docs/s | recall J >= 0.8 | recall 0.7-0.8 | false positives J <= 0.5 | vs datatrove | steps |")
    print("|---|---|---|---|---|---|---|---|")
    for result in results:
        found = pd.Series([f"p{i}a" in result["removed"] or f"p{i}b" in result["removed"] for i in range(len(pairs))])
        print(f"| {result['system']} | {result['wall']:.1f} | {2 * len(pairs) / result['wall']:,.0f} "
              f"| {found[jaccard >= 0.8].mean():.3f} | {found[(jaccard >= 0.7) & (jaccard < 0.8)].mean():.3f} "
              f"| {found[jaccard <= 0.5].mean():.3f} | {results[0]['wall'] / result['wall']:.1f}x | {result['detail']} |")  # fmt: skip


if __name__ == "__main__":
    main()
