"""What the driver's `ray.wait(list(pending), num_returns=1)` costs per finished task, by the number of tasks pending.

    python benchmarks/ray_wait_pending.py [--pending 1000,5000,20000] [--calls 50] [--num-cpus 2]

A local Ray started as `curate run` starts it (`curation.ray_session.connect`), then the largest count of tasks
submitted, each sleeping for the whole benchmark (so all but --num-cpus of them wait in Ray's queue, pending, as a
snapshot's shards do when all are submitted at once). Per count N: a dict of N of those pending refs plus one object
that is ready, put last, and `ray.wait(list(refs), num_returns=1)` exactly as `curation.runner` calls it after each
finished task: it returns the ready object, having looked at all N. Prints the median milliseconds of --calls such
waits, and the ratio to the first count.
Baseline: the first count, 1,000 pending: the driver's cap on tasks in flight (`curation.runner.MIN_IN_FLIGHT`,
4 per cluster CPU and at least 1,000) since issue 28's eighth pass; before it every shard was submitted at once.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", default="1000,5000,20000")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args()
    counts = [int(count) for count in args.pending.split(",")]

    import ray

    from curation import ray_session

    @ray.remote(num_cpus=1)
    def hold(seconds: float) -> None:
        time.sleep(seconds)

    with tempfile.TemporaryDirectory() as owner:
        started_ray = ray_session.connect(None, args.num_cpus, owner)
        try:
            started = time.perf_counter()
            pending = [hold.remote(3600) for _ in range(max(counts))]
            submit = time.perf_counter() - started
            ready = ray.put(None)
            ray.get(ready)
            print(f"{max(counts):,} tasks submitted in {submit:.2f} s ({1e6 * submit / max(counts):.0f} us each), "
                  f"local Ray with {args.num_cpus} CPUs")  # fmt: skip
            print(f"{'pending':>8}{'ms per ray.wait':>17}{'min ms':>8}{'x first':>9}")
            first = None
            for count in counts:
                refs = dict.fromkeys(pending[:count])
                refs[ready] = None
                seconds = []
                for _ in range(args.calls):
                    started = time.perf_counter()
                    (finished,), _ = ray.wait(list(refs), num_returns=1)
                    seconds.append(time.perf_counter() - started)
                    assert finished == ready
                median = statistics.median(seconds)
                first = first or median
                print(f"{count:>8,}{1000 * median:>17.2f}{1000 * min(seconds):>8.2f}{median / first:>8.1f}x")
        finally:
            ray_session.disconnect(started_ray, owner)


if __name__ == "__main__":
    main()
