"""The driver's manifest saves as shards finish: every task, indented (before), against `Manifest.save_soon`
(compact JSON, at most SAVE_SHARE of the time), on a local folder.

    python benchmarks/manifest_saves.py [--shards 250,500,1000,2000] [--stages 7] [--gap 0.05]

Each finished shard records one stats entry per stage (a real 8k-page run's entry, ~370 bytes) and then saves, as
curation.runner does after a fused segment. Shards finish `--gap` seconds apart on the manifest's clock (0.05 s: 64
workers on 3-second shards), added to the clock instead of slept; the saves are real. Prints, per shard count, the
seconds spent saving, the bytes written and the ratio; the baseline grows with the square of the shards. Both end
with every record saved.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curation import run_folder  # noqa: E402
from curation.io import write_json_atomic  # noqa: E402
from curation.run_folder import Manifest, RunFolder  # noqa: E402

ENTRY = {"bytes_in": 52_108_774, "bytes_out": 47_005_112, "docs_in": 2_000, "docs_out": 1_871, "input_sha256": "9" * 64,
         "dropped": {"gopher_short_doc": 41, "c4_few_sentences": 38, "fineweb_line_punct_ratio": 32, "gopher_enough_stop_words": 18},
         "input": "/data/CC-MAIN-2024-10/segments/1707947473347.0/warc/CC-MAIN-20240220211055-20240221001055-00000.warc.gz",
         "node": "10.0.0.12", "seconds": 2.37}  # fmt: skip


class TasksClock:
    """The manifest's clock: real time plus the simulated time between finished shards."""

    def __init__(self):
        self.simulated = 0.0

    def perf_counter(self) -> float:
        return time.perf_counter() + self.simulated


def run(folder: Path, shards: int, stages: int, gap: float, every_task: bool) -> tuple[float, int]:
    """Seconds spent saving and bytes written for `shards` finished shards."""
    clock = run_folder.time = TasksClock()
    stage_dirs = [f"{index:02d}_stage" for index in range(stages)]
    manifest = Manifest.start(RunFolder(str(folder), stage_dirs), ["hash"] * stages)
    spent, written = 0.0, 0
    for shard in range(shards):
        clock.simulated += gap
        for stage_dir in stage_dirs:
            manifest.record(stage_dir, {**ENTRY, "shard": shard})
        started = time.perf_counter()
        before = manifest.saved_at
        if every_task:
            write_json_atomic(manifest.fs, manifest.path, manifest.data)
        else:
            manifest.save_soon()
        spent += time.perf_counter() - started
        if every_task or manifest.saved_at != before:
            written += Path(manifest.path).stat().st_size
    started = time.perf_counter()
    manifest.save_if_unsaved()
    spent += time.perf_counter() - started
    assert sum(len(stage["shards"]) for stage in json.loads(Path(manifest.path).read_text())["stages"].values()) == shards * stages
    return spent, written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", default="500,1000,2000")
    parser.add_argument("--stages", type=int, default=7)
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between finished shards (simulated)")
    args = parser.parse_args()
    print(f"{'shards':>7}{'every task s':>14}{'MB':>9}{'save_soon s':>13}{'MB':>8}{'ratio':>8}")
    for shards in [int(count) for count in args.shards.split(",")]:
        with tempfile.TemporaryDirectory() as work:
            before, before_bytes = run(Path(work) / "before", shards, args.stages, args.gap, every_task=True)
            after, after_bytes = run(Path(work) / "after", shards, args.stages, args.gap, every_task=False)
        print(f"{shards:>7,}{before:>14.2f}{before_bytes / 1e6:>9.0f}{after:>13.2f}{after_bytes / 1e6:>8.0f}{before / after:>7.1f}x")


if __name__ == "__main__":
    main()
