"""`train` under each parallel layout on CPU (gloo): tokens/s and peak RSS per rank, against one rank.

    python benchmarks/layouts_cpu.py [--steps 12] [--seq-len 64] [--global-batch 16] [--rows dense|moe|muon]

--rows moe: the tiny-moe model (8 experts, top 2 + 1 shared) on one rank, FSDP 2, EP 2 and FSDP 2 x EP 2 (what
expert parallelism's all-to-all costs against FSDP's all-gathers); --rows muon: the tiny model with AdamW and with
Muon on one rank and under FSDP 2 (what Newton-Schulz on DTensors costs).

CPU ranks are for correctness, not speed: gloo moves every collective through the kernel's sockets and 4 ranks
share this machine's cores, so a layout's ratio here says what its communication costs on CPUs, never what it gains
on GPUs. The same tiny model (untied embeddings, so a pipeline can split it), fp32, shards made from the sample
snapshot; steady state: the first 3 steps are left out.
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_throughput import make_shards, run_arguments  # noqa: E402

LAYOUTS = {
    "1 rank (baseline)": ["--ranks", "1"],
    "FSDP 2": ["--dp-shard", "2"],
    "TP 2": ["--tp", "2"],
    "PP 2 (1F1B)": ["--pp", "2"],
    "HSDP 2x2": ["--dp-replicate", "2", "--dp-shard", "2"],
    "FSDP 2 x TP 2": ["--dp-shard", "2", "--tp", "2"],
    "FSDP 2 x PP 2": ["--dp-shard", "2", "--pp", "2"],
    "TP 2 x PP 2": ["--tp", "2", "--pp", "2"],
}


ROW_SETS = {
    "dense": LAYOUTS,
    "moe": {"1 rank (baseline)": ["--ranks", "1"], "FSDP 2": ["--dp-shard", "2"], "EP 2": ["--dp-shard", "2", "--ep", "2"],
            "FSDP 2 x EP 2": ["--dp-shard", "4", "--ep", "2"]},
    "muon": {"1 rank, AdamW (baseline)": ["--ranks", "1"], "1 rank, Muon": ["--ranks", "1", "--optimizer", "muon"],
             "FSDP 2, AdamW": ["--dp-shard", "2"], "FSDP 2, Muon": ["--dp-shard", "2", "--optimizer", "muon"]},
}  # fmt: skip


def measure(folder: Path, mixture: Path, name: str, flags: list[str], args) -> dict:
    out = folder / name.replace(" ", "_").replace(",", "")
    settings = folder / "settings.yaml"
    model = "tiny-moe" if args.rows == "moe" else "tiny"
    settings.write_text(f"model: {model}\nseq_len: {args.seq_len}\nglobal_batch: {args.global_batch}\nmicro_batch: 2\n"
                        "dtype: fp32\neval_every: 0\ncheckpoint_every: 1000\nmodel_overrides: {tie_embeddings: false}\n")  # fmt: skip
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "training", "--mixture", str(mixture), "--config", str(settings), "--steps",
                    str(args.steps), "--out", str(out), *flags], check=True, capture_output=True)  # fmt: skip
    wall = time.perf_counter() - began
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steady = [r["tokens_per_s"] for r in records if r["step"] > 3]
    return {"layout": name, "tokens_per_s": statistics.median(steady), "peak_rss_mb": max(r["peak_memory_mb"] for r in records),
            "wall_s": wall}  # fmt: skip


def main() -> None:
    args = run_arguments(__doc__, steps=12, seq_len=64, row_sets=list(ROW_SETS))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        mixture = make_shards(folder)
        rows = [measure(folder, mixture, name, flags, args) for name, flags in ROW_SETS[args.rows].items()]
    base = rows[0]["tokens_per_s"]
    print(f"| layout | tokens/s | vs 1 rank | peak RSS, rank 0 (MiB) | wall incl. start (s) |\n|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['layout']} | {row['tokens_per_s']:,.0f} | {row['tokens_per_s'] / base:.2f}x | {row['peak_rss_mb']:,.0f} | "
              f"{row['wall_s']:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
