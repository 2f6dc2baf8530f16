"""Model scoring throughput on the CPU: the `model_score` stage vs `transformers`' pipeline("text-classification").

    python benchmarks/model_score_throughput.py [--documents fineweb|wiki|sample] [--docs 400] [--threads 2] [--repeat 3]
    python benchmarks/model_score_throughput.py --dtype bfloat16   # both sides in bfloat16 (a CPU with AMX, or a GPU)
    python benchmarks/model_score_throughput.py --size base --device cuda --dtype bfloat16 --docs 4000   # a GPU: BERT-base

Documents: FineWeb's (../shared/corpus/fineweb, most longer than 512 tokens), Wikipedia articles (../shared/corpus/wiki,
WikiExtractor's files: stubs to long articles) or the sample snapshot's pages (a few words to thousands); the shared
corpus's sets fall back to the sample when absent. Model:
a BERT of 4 layers x 256, or BERT-base's 12 x 768 with --size base (random weights; a regression head as FineWeb-Edu's) with a WordPiece tokenizer trained on
the documents, saved with save_pretrained; both sides truncate to 512 tokens and use the same torch threads. Baselines:
the pipeline one document at a time (its default) and in batches of 16, in the same dtype as the stage. Ratio = stage docs/s / baseline docs/s
(goal >= 1.5); rows take turns, best of --repeat. The scores of both sides are compared too.
"""

import argparse
import glob
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FINEWEB = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "fineweb"
WIKI = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "wiki"


def documents(kind: str, count: int, folder: str) -> tuple[list[str], str]:
    files = sorted(glob.glob(f"{FINEWEB}/*/data/batches/*.parquet"))
    if kind == "fineweb" and files:
        texts = list(dict.fromkeys(t for f in files for t in pq.read_table(f, columns=["text"])["text"].to_pylist()))
        return texts[:count], "FineWeb (shared corpus)"
    wiki = sorted(glob.glob(f"{WIKI}/*/text/*/wiki_*"))
    if kind == "wiki" and wiki:
        articles = []
        for path in wiki:
            articles += [body.split("\n", 2)[-1].strip() for body in Path(path).read_text().split("</doc>") if "<doc" in body]
            if len(articles) >= count:
                return articles[:count], "Wikipedia (shared corpus)"
    from curation.sources import sample

    sample.generate(folder, pages=count, files=1, seed=2)
    truth = pq.read_table(f"{folder}/{sample.TRUTH_FILE}")
    return truth["body"].to_pylist()[:count], "sample snapshot pages"


SIZES = {"small": (4, 256), "base": (12, 768)}


def save_model(folder: Path, texts: list[str], size: str) -> None:
    import torch
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder.mkdir()
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(texts, vocab_size=8000)
    wordpiece.save_model(str(folder))
    tokenizer = BertTokenizerFast.from_pretrained(folder, model_max_length=512)
    layers, width = SIZES[size]
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=width, num_hidden_layers=layers, num_attention_heads=width // 64,
                        intermediate_size=4 * width, max_position_embeddings=512, num_labels=1)  # fmt: skip
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", choices=["fineweb", "wiki", "sample"], default="fineweb")
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", choices=list(SIZES), default="small")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="the model's dtype, both sides")
    args = parser.parse_args()
    import torch
    from transformers import pipeline

    from filters.model_score import ModelScorer

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        texts, origin = documents(args.documents, args.docs, folder)
        model_folder = Path(folder) / "model"
        save_model(model_folder, texts, args.size)
        table = pa.table({"id": [str(i) for i in range(len(texts))], "text": texts})
        stage = ModelScorer(ModelScorer.Params(model_path=str(model_folder), max_tokens=512, device=args.device,
                                               dtype=args.dtype))  # fmt: skip
        stage.ready()  # loading the model is not scoring
        classify = pipeline("text-classification", model=str(model_folder), device=args.device, dtype=getattr(torch, args.dtype),
                            function_to_apply="none")  # fmt: skip
        runs = {
            "pipeline, one document at a time (baseline)": lambda: classify(texts, truncation=True, max_length=512),
            "pipeline, batch_size 16 (baseline)": lambda: classify(texts, truncation=True, max_length=512, batch_size=16),
            "model_score stage": lambda: stage.process(table),
        }
        timings, outputs = dict.fromkeys(runs, float("inf")), {}
        for _ in range(args.repeat):  # rows take turns, so a slow spell of a shared machine is not one row's
            for name, run in runs.items():
                started = time.perf_counter()
                outputs[name] = run()
                timings[name] = min(timings[name], time.perf_counter() - started)
    tokens = sum(min(512, len(ids)) for ids in stage.tokenizer(texts)["input_ids"])
    print(f"{len(texts)} documents from {origin} ({tokens / len(texts):.0f} tokens each after truncation to 512); "
          f"BERT {'x'.join(map(str, SIZES[args.size]))} on {args.device} in {args.dtype}; {args.threads} torch threads; best of {args.repeat}")  # fmt: skip
    ours = timings["model_score stage"]
    for name, seconds in timings.items():
        print(f"  {name:45s} {len(texts) / seconds:8.1f} docs/s   stage ratio {seconds / ours:5.2f}x")
    scored = outputs["model_score stage"].kept["model_score"].to_numpy()
    for name in list(runs)[:2]:
        reference = np.array([row["score"] for row in outputs[name]])
        print(f"  largest |stage - {name.split(' (')[0]}| score: {np.abs(scored - reference).max():.2e}")

if __name__ == "__main__":
    main()
