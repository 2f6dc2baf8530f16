"""Would rows packed at tokenize time make `train`'s loader faster? The loader as it is vs reading pre-packed rows.

    python benchmarks/packing_at_tokenize.py [--parts 4] [--part-mib 2] [--seq-len 2048] [--global-batch 32] [--steps 200]

Input: token shards `write_tokens` makes of benchmarks/tokenize_vs_datatrove.py's curated parts (real sentences, 32
languages; a byte-level BPE of 8,192 trained on the first part). Baseline: pre-packed rows, i.e. every document's
tokens and EOS joined once into rows of seq_len + 1, held in memory as one array, a step taking `global_batch` rows
(the best a packed file could do: no Parquet read counted). Ours: `training.data.MixtureLoader.next_step()` (packs each
sequence from its documents when drawn, shuffled windows too). Printed: ms per step and tokens/s of each on one core.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--part-mib", type=float, default=2.0)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import pyarrow.parquet as pq
    import torch

    from benchmarks.tokenize_vs_datatrove import make_run
    from curation.tokenize import EOS, curated_parts, train_tokenizer, write_tokens
    from training.data import MixtureLoader
    from training.mixture import load_mixture

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="packing-"))
    run = make_run(work / "run", args.parts, args.part_mib, seed=0)
    tokenizer = train_tokenizer(pq.read_table(run / "01_final" / "part-00000.parquet")["text"].to_pylist(), 8192)
    write_tokens(str(run), curated_parts(str(run)), tokenizer, 0.0)
    (work / "mix.yaml").write_text(f"name: m\nsources:\n  web: {{paths: ['{run}/tokens/part-*.parquet']}}\n")
    mixture, eos = load_mixture(str(work / "mix.yaml")), tokenizer.token_to_id(EOS)
    step_tokens = args.seq_len * args.global_batch
    print(f"{args.parts} parts of {args.part_mib} MiB text; seq_len {args.seq_len}, global batch {args.global_batch} "
          f"({step_tokens:,} tokens a step), {args.steps} steps, one core")  # fmt: skip

    rows = []
    for shuffle in (False, True):
        loader = MixtureLoader(mixture, args.seq_len, args.global_batch, args.global_batch, 0, 1, 0, eos, shuffle_sequences=shuffle)
        loader.next_step()  # the first step reads the shards' token columns
        started = time.perf_counter()
        for _ in range(args.steps):
            loader.next_step()
        rows.append((f"loader as it is{', shuffled windows' if shuffle else ''}", (time.perf_counter() - started) / args.steps))

    stream = []
    for path in sorted((run / "tokens").glob("part-*.parquet")):
        for tokens in pq.read_table(path, columns=["tokens"])["tokens"].to_numpy(zero_copy_only=False):
            stream += [tokens, np.array([eos], np.int32)]
    joined = np.concatenate(stream)
    count = (len(joined) - 1) // args.seq_len
    packed = np.lib.stride_tricks.sliding_window_view(joined, args.seq_len + 1)[:: args.seq_len][:count].copy()
    order = np.random.default_rng(0).permutation(count)
    started = time.perf_counter()
    for step in range(args.steps):
        take = order[(np.arange(args.global_batch) + step * args.global_batch) % count]
        batch = torch.from_numpy(packed[take].astype(np.int64))
        batch[:, :-1], batch[:, 1:]
    rows.append(("pre-packed rows (baseline)", (time.perf_counter() - started) / args.steps))

    baseline = rows[-1][1]
    print(f"\n{'loader':<36}{'ms/step':>10}{'tokens/s':>16}{'vs pre-packed':>16}")
    for name, seconds in rows:
        print(f"{name:<36}{seconds * 1e3:>10.2f}{step_tokens / seconds:>16,.0f}{seconds / baseline:>15.1f}x")


if __name__ == "__main__":
    main()
