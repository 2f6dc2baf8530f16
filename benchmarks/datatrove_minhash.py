"""The anchor for benchmarks/dedup_vs_datatrove.py: datatrove's MinHash dedup (FineWeb's 14 x 8, 5-grams, 64-bit).

Runs under a Python that has datatrove (see benchmarks/README.md), not the project's own:
    python datatrove_minhash.py INPUT_DIR WORKDIR --workers W --tasks T
INPUT_DIR holds JSONL files of {"id", "text"}. Prints one JSON line: wall seconds per step and the ids it removed.
"""

import argparse
import glob
import gzip
import json
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("input_dir")
    parser.add_argument("workdir")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=4)
    args = parser.parse_args()

    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupBuckets
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers.jsonl import JsonlWriter
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.typeshelper import Languages

    work = os.path.abspath(args.workdir)
    config = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8, hash_config=HashConfig(precision=64))
    steps = [
        ("signatures", [JsonlReader(args.input_dir), MinhashDedupSignature(f"{work}/signatures", config=config, language=Languages.english)], args.tasks),
        ("buckets", [MinhashDedupBuckets(f"{work}/signatures", f"{work}/buckets", config=config)], config.num_buckets),
        ("cluster", [MinhashDedupCluster(f"{work}/buckets", f"{work}/remove_ids", config=config)], 1),
        ("filter", [JsonlReader(args.input_dir), MinhashDedupFilter(f"{work}/remove_ids", exclusion_writer=JsonlWriter(f"{work}/removed")), JsonlWriter(f"{work}/kept")], args.tasks),
    ]  # fmt: skip
    seconds = {}
    for name, pipeline, tasks in steps:
        started = time.perf_counter()
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=min(args.workers, tasks), logging_dir=f"{work}/logs/{name}").run()
        seconds[name] = round(time.perf_counter() - started, 2)
    removed = []
    for path in glob.glob(f"{work}/removed/*.jsonl.gz"):
        with gzip.open(path, "rt") as handle:
            removed += [json.loads(line)["id"] for line in handle]
    print(json.dumps({"seconds": seconds, "removed": removed}))


if __name__ == "__main__":
    main()
