"""`curate tokenize` vs datatrove's DocumentTokenizer vs HF `tokenizers` alone, same tokenizer, same curated parts.

    python benchmarks/tokenize_vs_datatrove.py [--parts 8] [--part-mib 2] [--scaling 2,4,8]
        [--anchor-python .venv-anchor/bin/python] [--keep WORKDIR]

Input: a curated run folder (manifest + final-stage parts: id, source, text) written here from
../shared/data/langid/sentences (real sentences, 32 languages): each document 10-80 sentences of one language, drawn
with a seed; `--parts` parts of about `--part-mib` MiB of text each. The tokenizer: a byte-level BPE of 8,192 tokens
(`curation.tokenize.train_tokenizer`) trained on the first part, saved once and given to every contender.
Contenders, each a subprocess of its own, one after the other, every one with RAYON_NUM_THREADS=1 so a worker is one
core (the `tokenizers` library would otherwise spread each batch over every core):
  floor      `Tokenizer.encode_batch` over every part's text, batches of 1,024, encoding seconds only: in one process,
             and in W = 2 processes at once, each encoding every W-th part (the library's own speed per core while
             every core works, as ours does with 2 workers)
  ours       `curate tokenize RUN --tokenizer FILE --num-cpus W` (Ray start and stop included), W = 1 and 2
  datatrove  0.10.1 ParquetReader(text only) -> DocumentTokenizer(same tokenizer.json, EOS appended, no shuffle) on a
             LocalPipelineExecutor with one task per part, W workers, under the anchor venv
Printed: wall, tokens/s, tokens/s per core (tokens / wall / W), that per-core figure over the floor's and over
datatrove's at the same W (a floor's "wall": its processes' encoding seconds over W), peak RSS of the command's
process tree (benchmarks/curate_vs_datatrove.PeakByRole), and, with `--scaling`, ours at W = 2 on 2x, 4x, 8x the
parts (peak RSS should stay flat). Tokens are the documents' tokens
(datatrove's EOS per document not counted).
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ROOT.parent / "shared" / "data" / "langid" / "sentences"
ONE_CORE = {"RAYON_NUM_THREADS": "1"}


def make_run(folder: Path, parts: int, part_mib: float, seed: int) -> Path:
    """A curated run folder as `curate tokenize` and datatrove's ParquetReader read it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not SENTENCES.is_dir():
        raise SystemExit(f"needs {SENTENCES} (the project's shared data)")
    languages = {path.stem: path.read_text().splitlines() for path in sorted(SENTENCES.glob("*.txt"))}
    rng = random.Random(seed)
    (folder / "01_final").mkdir(parents=True, exist_ok=True)
    for part in range(parts):
        texts, size = [], 0
        while size < part_mib * 2**20:
            lines = languages[rng.choice(sorted(languages))]
            texts.append(" ".join(rng.choice(lines) for _ in range(rng.randint(10, 80))))
            size += len(texts[-1].encode())
        ids = [f"p{part}-d{i}" for i in range(len(texts))]
        pq.write_table(pa.table({"id": ids, "source": ["web"] * len(texts), "text": texts}), folder / "01_final" / f"part-{part:05d}.parquet")
    manifest = {"recipe": {"stages": [{"stage": "final"}]}, "inputs": [f"in-{i}" for i in range(parts)],
                "stages": {"01_final": {"shards": {str(i): {} for i in range(parts)}}}}  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def floor(run: str, tokenizer_file: str, index: str = "0", count: str = "1") -> None:
    """Subcommand: encode_batch over the text of every `count`-th part from `index` in this process; prints tokens and
    encoding seconds."""
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    tokenizer, tokens, seconds = Tokenizer.from_file(tokenizer_file), 0, 0.0
    for path in sorted(Path(run, "01_final").glob("part-*.parquet"))[int(index) :: int(count)]:
        texts = pq.read_table(path, columns=["text"])["text"].to_pylist()
        started = time.perf_counter()
        for start in range(0, len(texts), 1024):
            tokens += sum(len(e.ids) for e in tokenizer.encode_batch(texts[start : start + 1024]))
        seconds += time.perf_counter() - started
    print(json.dumps({"tokens": tokens, "encode_s": seconds}))


def datatrove(run: str, out: str, tokenizer_file: str, workers: int) -> None:
    """Subcommand, under the anchor venv: datatrove's tokenizer, one task per part."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    parts = len(list(Path(run, "01_final").glob("part-*.parquet")))
    LocalPipelineExecutor(
        [ParquetReader(f"{run}/01_final", glob_pattern="part-*.parquet", read_metadata=False),
         DocumentTokenizer(f"{out}/tokens", tokenizer_name_or_path=tokenizer_file, eos_token="<|endoftext|>", shuffle_documents=False)],
        tasks=parts, workers=workers, logging_dir=f"{out}/logs",
    ).run()  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--part-mib", type=float, default=2.0)
    parser.add_argument("--scaling", default="2,4,8", help="input multiples for ours at 2 workers (empty: none)")
    parser.add_argument("--anchor-python", default=str(ROOT / ".venv-anchor" / "bin" / "python"),
                        help="a Python with datatrove[io,processing]==0.10.1 (see benchmarks/README.md)")  # fmt: skip
    parser.add_argument("--keep", default=None, help="work folder to keep (default: a temporary one)")
    args = parser.parse_args()
    if not Path(args.anchor_python).is_file():
        raise SystemExit(f"no anchor Python at {args.anchor_python}: python -m venv .venv-anchor && "
                         ".venv-anchor/bin/pip install 'datatrove[io,processing]==0.10.1'")  # fmt: skip
    sys.path.insert(0, str(ROOT))
    from benchmarks.curate_vs_datatrove import measured
    from curation.tokenize import train_tokenizer

    work = Path(args.keep or tempfile.mkdtemp(prefix="tokenize-vs-datatrove-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.update(ONE_CORE)
    run = make_run(work / "run-1x", args.parts, args.part_mib, seed=0)
    import pyarrow.parquet as pq

    tokenizer = work / "tokenizer.json"
    tokenizer.write_text(train_tokenizer(pq.read_table(run / "01_final" / "part-00000.parquet")["text"].to_pylist(), 8192).to_str())
    text_mib = sum(pq.read_metadata(p).row_group(0).column(2).total_uncompressed_size for p in (run / "01_final").glob("*.parquet")) / 2**20
    print(f"{args.parts} parts, {text_mib:,.0f} MiB of text (Parquet, uncompressed), {os.cpu_count()} CPUs; work folder {work}", flush=True)

    rows = [floor_row(run, tokenizer, work, workers) for workers in (1, 2)]
    tokens = rows[0]["tokens"]
    assert rows[1]["tokens"] == tokens, f"the floor counted {tokens} tokens in one process, {rows[1]['tokens']} in two"

    def ours(folder: Path, workers: int, label: str) -> dict:
        shutil.rmtree(folder / "tokens", ignore_errors=True)  # a run from scratch, not a resume
        result = measured([sys.executable, "-m", "curation", "tokenize", str(folder), "--tokenizer", str(tokenizer),
                           "--num-cpus", str(workers)], work / f"{label}.log")  # fmt: skip
        stats = json.loads((folder / "tokens" / "stats.json").read_text())
        counted = sum(source["tokens"] for source in stats["sources"].values())
        task_s = sum(json.loads(p.read_text())["seconds"] for p in (folder / "tokens" / "parts").glob("*.json"))
        return {"run": label, "workers": workers, "tokens": counted, "task_s": round(task_s, 2), **result}

    for workers in (1, 2):
        rows.append(ours(run, workers, f"curate tokenize, {workers} worker(s)"))
        assert rows[-1]["tokens"] == tokens, f"ours counted {rows[-1]['tokens']} tokens, the floor {tokens}"
        print(f"  {rows[-1]['run']}: {rows[-1]['wall_s']} s", flush=True)
        out = work / f"datatrove-{workers}"
        command = [args.anchor_python, __file__, "datatrove", str(run), str(out), str(tokenizer), str(workers)]
        rows.append({"run": f"datatrove 0.10.1, {workers} worker(s)", "workers": workers, "tokens": tokens,
                     **measured(command, work / f"datatrove-{workers}.log")})  # fmt: skip
        print(f"  {rows[-1]['run']}: {rows[-1]['wall_s']} s", flush=True)
    print_table(rows)
    for multiple in [int(m) for m in args.scaling.split(",") if m]:
        scaled = make_run(work / f"run-{multiple}x", args.parts * multiple, args.part_mib, seed=multiple)
        rows.append({**ours(scaled, 2, f"curate tokenize, 2 workers, {multiple}x input"), "scaled": True})
        print(f"  {rows[-1]['run']}: {rows[-1]['wall_s']} s", flush=True)
    if args.scaling:
        print_table(rows)


def floor_row(run: Path, tokenizer: Path, work: Path, workers: int) -> dict:
    """The floor in `workers` processes started together, each on every workers-th part."""
    logs = [work / f"floor-{workers}-{index}.log" for index in range(workers)]
    processes = []
    for index, log in enumerate(logs):
        with log.open("w") as out:
            processes.append(subprocess.Popen([sys.executable, __file__, "floor", str(run), str(tokenizer), str(index), str(workers)],
                                              stdout=out, stderr=subprocess.STDOUT))  # fmt: skip
    codes = [process.wait() for process in processes]
    for log, code in zip(logs, codes):
        if code:
            raise SystemExit(f"the floor exited {code}: {log}\n{log.read_text()[-3000:]}")
    results = [json.loads(log.read_text().strip().splitlines()[-1]) for log in logs]
    name = "floor: encode_batch, 1 process" if workers == 1 else f"floor: encode_batch, {workers} processes at once"
    return {"run": name, "workers": workers, "tokens": sum(r["tokens"] for r in results), "floor": True,
            "wall_s": round(sum(r["encode_s"] for r in results) / workers, 2), "peak_rss_mib": None}  # fmt: skip


def print_table(rows: list[dict]) -> None:
    """Per core: tokens / wall / workers; `vs floor` and `vs datatrove` at the same workers (and input)."""
    floors = {row["workers"]: row["tokens"] / row["wall_s"] / row["workers"] for row in rows if row.get("floor")}
    print(f"\n{'run':<42}{'tokens':>12}{'wall s':>8}{'tokens/s':>12}{'per core':>11}{'vs floor':>10}{'vs datatrove':>14}{'peak RSS':>12}")
    for row in rows:
        per_core = row["tokens"] / row["wall_s"] / row["workers"]
        anchor = next((r for r in rows if r["run"].startswith("datatrove") and r["workers"] == row["workers"]), None)
        versus = f"{per_core / (anchor['tokens'] / anchor['wall_s'] / anchor['workers']):.2f}x" if anchor and not row.get("scaled") else ""
        rss = f"{row['peak_rss_mib']:,} MiB" if row["peak_rss_mib"] is not None else ""
        print(f"{row['run']:<42}{row['tokens']:>12,}{row['wall_s']:>8.1f}{row['tokens'] / row['wall_s']:>12,.0f}{per_core:>11,.0f}"
              f"{per_core / floors[row['workers']]:>9.2f}x{versus:>14}{rss:>12}")  # fmt: skip
    print("\nours, steady state (tokens / summed task seconds: Ray's start and the driver's work left out):")
    for row in rows:
        if "task_s" in row:
            rate = row["tokens"] / row["task_s"]
            print(f"  {row['run']}: {rate:,.0f} tokens/s per core, {rate / floors[row['workers']]:.2f}x the floor at {row['workers']} worker(s)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["floor"]:
        floor(*sys.argv[2:])
    elif sys.argv[1:2] == ["datatrove"]:
        datatrove(*sys.argv[2:5], int(sys.argv[5]))
    else:
        main()
