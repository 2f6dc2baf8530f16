"""What the driver's manifest costs at a whole snapshot's size: one manifest of SHARDS x STAGES finished entries, built
in a fresh process, then saved as `Manifest.save` saves it (compact JSON, written atomically to a local folder).

    python benchmarks/manifest_at_scale.py [--sizes 10000x7,64000x11] [--repeat 3]

Each entry is `benchmarks/manifest_saves.py`'s: a real 8k-page run's stats entry (~370 bytes), with its shard number.
64,000 shards x 11 stages is one Common Crawl snapshot's WARC files through fineweb-snapshot's stages. Printed per
size: the compact file's MB, the seconds to encode it and to save it (encode + atomic write; best of --repeat), the
RSS the driver holds for the manifest's Python objects (the fresh process's RSS after building it, less its RSS
before), and the least interval between saves that `Manifest.save_soon` allows (the save's seconds / SAVE_SHARE).
The entries share their string values, as a real manifest's do not (input paths differ by shard): the RSS is a floor.
Baseline: the same manifest indented (`write_json_atomic` without `compact`), as every save was written before
issue 28's eighth pass: its MB and encode seconds, and the ratio to compact.
"""

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one(shards: int, stages: int, repeat: int) -> dict:
    """Build, encode and save one manifest in this process; its figures."""
    from benchmarks.manifest_saves import ENTRY
    from curation.run_folder import SAVE_SHARE, Manifest, RunFolder

    gc.collect()
    rss_before = psutil.Process().memory_info().rss
    with tempfile.TemporaryDirectory() as work:
        stage_dirs = [f"{index:02d}_stage" for index in range(stages)]
        manifest = Manifest.start(RunFolder(str(Path(work) / "run"), stage_dirs), ["hash"] * stages)
        for shard in range(shards):
            for stage_dir in stage_dirs:
                manifest.record(stage_dir, {**ENTRY, "dropped": dict(ENTRY["dropped"]), "shard": shard})
        gc.collect()
        held = psutil.Process().memory_info().rss - rss_before
        encode_compact = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            compact = json.dumps(manifest.data, sort_keys=True, separators=(",", ":"))
            encode_compact = min(encode_compact, time.perf_counter() - started)
            compact_bytes = len(compact.encode())
            del compact
        started = time.perf_counter()
        indented = json.dumps(manifest.data, indent=1, sort_keys=True)
        encode_indented = time.perf_counter() - started
        indented_bytes = len(indented.encode())
        del indented
        save = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            manifest.save()
            save = min(save, time.perf_counter() - started)
        assert Path(manifest.path).stat().st_size == compact_bytes
    return {"shards": shards, "stages": stages, "compact_mb": compact_bytes / 1e6, "encode_s": encode_compact,
            "save_s": save, "held_mib": held / 2**20, "interval_s": save / SAVE_SHARE,
            "indented_mb": indented_bytes / 1e6, "indented_encode_s": encode_indented}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000x7,64000x11", help="SHARDSxSTAGES, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="best of N for the compact encode and the save")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # SHARDSxSTAGES, measured in this process
    args = parser.parse_args()
    if args.one:
        shards, stages = (int(part) for part in args.one.split("x"))
        print(json.dumps(one(shards, stages, args.repeat)))
        return
    print(f"{'shards':>7}{'stages':>7}{'compact MB':>11}{'encode s':>9}{'save s':>8}{'held MiB':>9}{'save every s':>13}"
          f"{'indented MB':>12}{'encode s':>9}{'x compact':>10}")  # fmt: skip
    for size in args.sizes.split(","):
        command = [sys.executable, __file__, "--one", size, "--repeat", str(args.repeat)]
        result = subprocess.run(command, check=True, capture_output=True, text=True)
        r = json.loads(result.stdout.strip().splitlines()[-1])
        print(f"{r['shards']:>7,}{r['stages']:>7}{r['compact_mb']:>11.1f}{r['encode_s']:>9.2f}{r['save_s']:>8.2f}"
              f"{r['held_mib']:>9.0f}{r['interval_s']:>13.0f}{r['indented_mb']:>12.1f}{r['indented_encode_s']:>9.2f}"
              f"{r['indented_encode_s'] / r['encode_s']:>9.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
