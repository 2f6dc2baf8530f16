"""The perplexity stage: bits per byte equal a direct computation with `transformers` (one document at a time, after
the end-of-text token), long documents in windows that score every token once, CCNet's buckets and a threshold, and
folders that are not a causal model with its tokenizer refused in one line at recipe load."""

import json
import math
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from curation.recipe import RecipeError, parse_recipe
from filters.perplexity import PerplexityScorer

WORDS = "the river runs past the old town where people sell bread and fish at the market every morning".split()


def texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.choice([2, 6, 15, 30]))) + rng.choice([".", "!", " é"])
            for _ in range(count)]  # fmt: skip


def save_causal_model(folder: Path, seed: int = 0) -> Path:
    """A tiny random Llama with a byte-level BPE whose end-of-text token is `train`'s, as `train export` writes."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts(200, seed=9), trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return save_causal_model(tmp_path_factory.mktemp("lm") / "model")


def direct_bits_per_byte(folder: Path, text: str, window: int | None = None, stride: int | None = None) -> float:
    """transformers' loss, document by document; with a window, windows of the full width ending every `stride`
    tokens after the first, each scoring the tokens after the previous one's end (and the last ending at the end)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    lm = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.tensor([[tokenizer.eos_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"]]])
    length = ids.shape[1]
    window, stride = window or length, stride or length
    ends = [*range(window, length, stride), length] if window < length else [length]  # each window the full width
    nats, previous_end = 0.0, 1  # the end-of-text token is context, never scored
    with torch.inference_mode():
        for end in ends:
            chunk = ids[:, max(0, end - window) : end]
            losses = torch.nn.functional.cross_entropy(lm(chunk).logits[0, :-1], chunk[0, 1:], reduction="none")
            nats += float(losses[losses.shape[0] - (end - previous_end) :].sum())
            previous_end = end
    return nats / math.log(2) / len(text.encode("utf-8"))


def table_of(documents: list[str]) -> pa.Table:
    return pa.table({"id": [f"d{i}" for i in range(len(documents))], "text": documents})


def test_bits_per_byte_equal_transformers_document_by_document(model):
    documents = texts(30)
    stage = PerplexityScorer(PerplexityScorer.Params(model_path=str(model), batch_tokens=200))
    got = stage.process(table_of(documents)).kept["perplexity_bpb"].to_numpy()
    expected = [direct_bits_per_byte(model, text, 64, 32) for text in documents]  # the model's positions, half as stride
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert 0 < got.min() and got.max() < 20
    empty = stage.process(table_of([]))  # a batch its earlier stages emptied
    assert empty.kept.num_rows == 0 and "perplexity_bpb" in empty.kept.column_names


def test_a_document_longer_than_the_window_is_scored_in_windows_each_token_once(model):
    long = " ".join(texts(20, seed=3))
    stage = PerplexityScorer(PerplexityScorer.Params(model_path=str(model), window=16, stride=5))
    stage.ready()
    ids = stage.tokenizer(long, add_special_tokens=False)["input_ids"]
    pieces = stage.windows(ids)
    assert len(ids) > 100 and sum(count for _, count in pieces) == len(ids) and all(len(w) <= 16 for w, _ in pieces)
    got = stage.process(table_of([long, "the river."])).kept["perplexity_bpb"].to_numpy()
    np.testing.assert_allclose(got, [direct_bits_per_byte(model, long, 16, 5), direct_bits_per_byte(model, "the river.")], rtol=1e-5)
    whole = PerplexityScorer(PerplexityScorer.Params(model_path=str(model), window=1000)).process(table_of([long]))
    assert whole.kept["perplexity_bpb"][0].as_py() == pytest.approx(direct_bits_per_byte(model, long, 64, 32), rel=1e-5)  # capped at its 64 positions


def test_buckets_keep_and_threshold(model):
    documents = texts(40, seed=5)
    scores = PerplexityScorer(PerplexityScorer.Params(model_path=str(model))).process(table_of(documents)).kept
    bpb = scores["perplexity_bpb"].to_numpy()
    low, high = np.quantile(bpb, [0.3, 0.6]).tolist()
    stage = PerplexityScorer(PerplexityScorer.Params(model_path=str(model), cutoffs=[low, high], keep=["head", "middle"]))
    result = stage.process(table_of(documents))
    buckets = ["head" if s < low else "middle" if s < high else "tail" for s in bpb]
    assert result.kept["perplexity_bucket"].to_pylist() == [b for b in buckets if b != "tail"]
    assert result.dropped == {"perplexity_tail": buckets.count("tail")}
    assert result.stats["perplexity_buckets"] == {b: buckets.count(b) for b in ("head", "middle", "tail")}
    capped = PerplexityScorer(PerplexityScorer.Params(model_path=str(model), threshold=float(np.median(bpb)))).process(table_of(documents))
    assert capped.kept.num_rows == int((bpb <= np.median(bpb)).sum()) and set(capped.dropped) == {"perplexity_above_threshold"}


@pytest.mark.parametrize("rule", [{}, {"cutoffs": [0.5, 100.0]}, {"threshold": 100.0}])
def test_empty_or_blank_text_gets_no_score_and_is_dropped_as_empty_text(model, rule):
    """It has no bytes to score: it once counted 0 bits per byte, the best bucket."""
    documents = ["the river.", "", " \n\t ", "bread and fish!"]
    result = PerplexityScorer(PerplexityScorer.Params(model_path=str(model), **rule)).process(table_of(documents))
    assert result.kept["id"].to_pylist() == ["d0", "d3"] and result.dropped == {"empty_text": 2}
    assert result.removed["perplexity_bpb"].to_pylist() == [None, None]
    np.testing.assert_allclose(result.kept["perplexity_bpb"].to_numpy(), [direct_bits_per_byte(model, documents[0]),
                                                                         direct_bits_per_byte(model, documents[3])], rtol=1e-5)  # fmt: skip
    if "cutoffs" in rule:
        assert result.kept["perplexity_bucket"].to_pylist() == ["middle", "middle"]
        assert result.removed["perplexity_bucket"].to_pylist() == [None, None]
        assert result.stats["perplexity_buckets"] == {"middle": 2}


def test_with_max_tokens_a_huge_document_is_cut_before_it_is_tokenized_and_scores_the_same(model, monkeypatch):
    """A 26 MB page was tokenized whole (86 s) to score its first tokens."""
    import filters.perplexity

    huge = " ".join(texts(20000, seed=7))
    stage = PerplexityScorer(PerplexityScorer.Params(model_path=str(model), max_tokens=40))
    stage.ready()
    lengths: list[int] = []
    tokenize = type(stage.tokenizer).__call__

    def measured(tokenizer, documents, **options):
        lengths.extend(len(text) for text in documents)
        return tokenize(tokenizer, documents, **options)

    with monkeypatch.context() as patched:
        patched.setattr(type(stage.tokenizer), "__call__", measured)
        cut = stage.process(table_of([huge, "the river."])).kept["perplexity_bpb"].to_numpy()
    assert len(huge) > 500_000 and max(lengths) == 40 * filters.perplexity.CHARS_PER_TOKEN_BOUND
    monkeypatch.setattr(filters.perplexity, "CHARS_PER_TOKEN_BOUND", len(huge))  # tokenized whole, as before
    np.testing.assert_allclose(cut, stage.process(table_of([huge, "the river."])).kept["perplexity_bpb"].to_numpy(), rtol=1e-6)


def test_what_is_not_a_causal_model_with_its_tokenizer_is_one_line_at_recipe_load(model, tmp_path):
    from transformers import BertConfig, BertForSequenceClassification

    classifier = tmp_path / "classifier"
    BertForSequenceClassification(BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=16)).save_pretrained(classifier)  # fmt: skip
    (classifier / "tokenizer.json").write_text((model / "tokenizer.json").read_text())
    (classifier / "tokenizer_config.json").write_text((model / "tokenizer_config.json").read_text())
    ships_code = tmp_path / "ships-code"  # its tokenizer names a class in a Python file beside it
    shutil.copytree(model, ships_code)
    settings = json.loads((ships_code / "tokenizer_config.json").read_text())
    (ships_code / "tokenizer_config.json").write_text(json.dumps({**settings, "auto_map": {"AutoTokenizer": [None, "custom.Fast"]}}))
    cases = {
        str(tmp_path / "nowhere"): re.escape(f"model folder not found: {tmp_path / 'nowhere'}"),
        str(classifier): re.escape(f"{classifier} is a BertForSequenceClassification, not a causal language model"),
        str(ships_code): re.escape(f"{ships_code} ships code that runs when it loads (auto_map in its tokenizer_config.json): "
                                   "set `trust_remote_code: true` in the stage if you trust it"),
    }
    for path, message in cases.items():
        with pytest.raises(RecipeError) as error:
            parse_recipe({"name": "p", "stages": [{"stage": "perplexity", "params": {"model_path": path}}]}, "p.yaml")
        assert len(str(error.value).splitlines()) == 1 and re.match(r"p\.yaml: invalid recipe: stages\[0\]\.params: " + message, str(error.value))
    with pytest.raises(RecipeError, match="the head's bound comes first"):
        parse_recipe({"name": "p", "stages": [{"stage": "perplexity", "params": {"model_path": str(model), "cutoffs": [3, 1]}}]}, "p.yaml")


@pytest.mark.slow
def test_a_run_with_perplexity_buckets_and_a_classifier_reports_which_pages_each_bucket_holds(model, tmp_path):
    """`curate run` on Ray with a perplexity stage in buckets (head and middle kept) and a classifier after it, then
    `curate report`: a histogram per score and, per bucket, its count, median and pages."""
    import json
    import subprocess
    import sys

    import pyarrow.parquet as pq

    from curation.report import perplexity_buckets
    from tests.test_model_score import save_model

    classifier = save_model(tmp_path / "classifier", 1, seed=0)
    documents = list(dict.fromkeys(texts(80, seed=6)))
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(documents))], "text": documents,
                             "url": [f"https://example.org/{i}" for i in range(len(documents))]}), tmp_path / "docs.parquet")  # fmt: skip
    recipe = {"name": "ppl", "source": {"kind": "parquet"}, "stages": [
        {"stage": "perplexity", "params": {"model_path": str(model), "cutoffs": [3.0, 3.6], "keep": ["head", "middle"]}},
        {"stage": "model_score", "params": {"model_path": str(classifier), "column": "edu", "max_tokens": 48}},
    ]}  # fmt: skip
    (tmp_path / "ppl.yaml").write_text(json.dumps(recipe))
    out = tmp_path / "run"
    for command in (["run", str(tmp_path / "ppl.yaml"), "--input", str(tmp_path / "docs.parquet"), "--output", str(out),
                     "--num-cpus", "2", "--keep-removed"], ["report", str(out)]):  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "curation", *command], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    kept = pq.read_table(out / "02_model_score").to_pandas()
    assert set(kept.perplexity_bucket) <= {"head", "middle"} and kept.edu.notna().all()
    table = perplexity_buckets(str(out))
    counts = table.groupby("bucket").documents.first().to_dict()
    removed = pq.read_table(out / "removed" / "01_perplexity").num_rows
    assert counts.get("tail", 0) == removed and sum(counts.values()) == len(documents) and len(counts) >= 2
    page = (out / "report.html").read_text()
    assert "Model scores and perplexity buckets" in page and "https://example.org/" in page and "edu (01_perplexity" not in page
