"""The model_score stage: scores equal `transformers`' own per-document outputs (a regression head and a 3-class
classifier, tiny random models saved with save_pretrained), in any order and sharding, through `curate run` on Ray
and in an actor holding a GPU where the cluster declares one; bad model folders are one line at recipe load."""

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.recipe import RecipeError, parse_recipe
from filters.model_score import ModelScorer, length_sorted_batches

WORDS = ("the a of to and in is river town market bread school lesson science history water energy cell plant "
         "student teacher learn study page click buy now cheap deal login home news sport game").split()  # fmt: skip


def documents(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.choice([3, 9, 20, 40, 90]))) for _ in range(count)]


def save_model(folder: Path, num_labels: int, seed: int) -> Path:
    """A tiny random BERT sequence classifier and a WordPiece tokenizer over WORDS, as save_pretrained writes them."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    tokenizer = BertTokenizerFast.from_pretrained(folder)  # from vocab.txt alone, in transformers 4 and 5
    labels = {0: "low", 1: "mid", 2: "high"} if num_labels == 3 else {0: "LABEL_0"}
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, num_labels=num_labels, id2label=labels,
                        label2id={v: k for k, v in labels.items()}, initializer_range=0.5)  # fmt: skip  # scores spread
    torch.manual_seed(seed)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {"regression": save_model(root / "regression", 1, 0), "classes": save_model(root / "classes", 3, 1)}


def reference(folder: Path, texts: list[str], max_tokens: int, positive: int | None) -> np.ndarray:
    """transformers' own output, one document at a time, unpadded."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    values = []
    with torch.inference_mode():
        for text in texts:
            logits = model(**tokenizer(text, truncation=True, max_length=max_tokens, return_tensors="pt")).logits[0]
            values.append(float(logits[0] if positive is None else logits.softmax(-1)[positive]))
    return np.array(values)


def table_of(texts: list[str]) -> pa.Table:
    return pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": texts})


@pytest.mark.parametrize("kind, positive", [("regression", None), ("classes", "high")])
def test_scores_equal_transformers_per_document_in_any_order(models, kind, positive):
    texts = documents(60)
    params = {"model_path": str(models[kind]), "max_tokens": 48, "batch_tokens": 300}
    if positive:
        params["positive_class"] = positive
    stage = ModelScorer(ModelScorer.Params(**params))
    expected = reference(models[kind], texts, 48, 2 if positive else None)
    scored = stage.process(table_of(texts)).kept
    np.testing.assert_allclose(scored["model_score"].to_numpy(), expected, atol=1e-5, rtol=0)
    order = np.random.default_rng(1).permutation(len(texts))
    shuffled = stage.process(table_of([texts[i] for i in order])).kept["model_score"].to_numpy()
    np.testing.assert_allclose(shuffled, expected[order], atol=1e-5, rtol=0)
    assert max(len(t.split()) for t in texts) > 48  # the longest were truncated, not refused
    assert stage.process(table_of([])).kept.column_names == ["id", "text", "model_score"]  # a batch emptied before it


def test_batches_are_length_sorted_and_hold_at_most_batch_tokens_once_padded():
    lengths = [5, 50, 7, 48, 3, 200, 49]
    batches = length_sorted_batches(lengths, 100)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    assert batches[0] == [5]  # longer than batch_tokens: alone
    assert all(len(batch) * max(lengths[i] for i in batch) <= 100 for batch in batches[1:])
    flat = [lengths[i] for batch in batches for i in batch]
    assert flat == sorted(lengths, reverse=True)


def test_threshold_top_fraction_int_score_and_several_scorers(models):
    texts = documents(40, seed=2)
    regression = {"model_path": str(models["regression"])}
    scores = ModelScorer(ModelScorer.Params(**regression)).process(table_of(texts)).kept["model_score"].to_numpy()
    cut = float(np.median(scores))
    kept = ModelScorer(ModelScorer.Params(**regression, threshold=cut)).process(table_of(texts))
    assert kept.kept.num_rows == int((scores >= cut).sum()) and kept.dropped == {"model_score_below_threshold": 40 - kept.kept.num_rows}
    top = ModelScorer(ModelScorer.Params(**regression, keep_top_fraction=0.25, column="edu", int_score=True))
    assert not top.per_document
    result = top.process(table_of(texts))
    assert result.kept.num_rows == 10 and result.dropped == {"edu_not_top_fraction": 30}
    assert result.kept["edu_int"].to_pylist() == np.rint(np.clip(result.kept["edu"].to_numpy(), 0, 5)).astype(int).tolist()
    recipe = parse_recipe({"name": "two", "stages": [
        {"stage": "model_score", "params": {**regression, "column": "edu"}},
        {"stage": "model_score", "params": {"model_path": str(models["classes"]), "positive_class": 2, "column": "hq"}},
    ]}, "two.yaml")  # fmt: skip
    assert [set(recipe.build(i).adds) for i in range(2)] == [{"edu"}, {"hq"}]


def bad_folders(models, root: Path) -> dict[str, tuple[dict, str]]:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    bare = root / "bare-encoder"
    BertModel(BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)).save_pretrained(bare)
    no_tokenizer = root / "no-tokenizer"
    no_tokenizer.mkdir()
    (no_tokenizer / "config.json").write_text((models["regression"] / "config.json").read_text())
    other = root / "other-tokenizer"
    other.mkdir()
    (other / "config.json").write_text((models["regression"] / "config.json").read_text())
    (other / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(100)]))
    BertTokenizerFast.from_pretrained(other).save_pretrained(other)
    regression, classes = str(models["regression"]), str(models["classes"])
    return {  # the message after "stages[0].params: ", as a regular expression
        "missing": ({"model_path": str(root / "nowhere")}, re.escape(f"model folder not found: {root / 'nowhere'}")),
        "encoder": ({"model_path": str(bare)}, re.escape(f"{bare} is a BertModel, not a sequence classifier")),
        "no tokenizer": ({"model_path": str(no_tokenizer)}, re.escape(f"{no_tokenizer} holds no tokenizer that loads")),
        "other tokenizer": ({"model_path": str(other)},
                            re.escape(f"{other}: its tokenizer has 105 tokens, more than the model's vocabulary of {5 + len(WORDS)}")),
        "classes unnamed": ({"model_path": classes}, r"positive_class: .* has 3 classes \(low, mid, high\)"),
        "no such class": ({"model_path": classes, "positive_class": "top"}, r"positive_class: 'top' is not a class"),
        "regression class": ({"model_path": regression, "positive_class": 1}, r"positive_class: .* is a regression head"),
        "both rules": ({"model_path": regression, "threshold": 1, "keep_top_fraction": 0.5}, r"give threshold or .*not both"),
    }


def test_a_bad_model_folder_is_one_line_naming_it_when_the_recipe_loads(models, tmp_path):
    for case, (params, message) in bad_folders(models, tmp_path).items():
        with pytest.raises(RecipeError) as error:
            parse_recipe({"name": "m", "stages": [{"stage": "model_score", "params": params}]}, "m.yaml")
        assert len(str(error.value).splitlines()) == 1, case
        assert re.match(r"m\.yaml: invalid recipe: stages\[0\]\.params: " + message, str(error.value)), (case, str(error.value))


def write_inputs(folder: Path, texts: list[str], files: int, seed: int) -> str:
    """The documents, shuffled, over `files` Parquet files with their ids."""
    folder.mkdir(parents=True)
    order = random.Random(seed).sample(range(len(texts)), len(texts))
    for k in range(files):
        rows = order[k::files]
        pq.write_table(pa.table({"id": [f"d{i}" for i in rows], "text": [texts[i] for i in rows]}), folder / f"docs-{k}.parquet")
    return str(folder / "docs-*.parquet")


def recipe_text(models, column="edu") -> str:
    return json.dumps({"name": "scored", "source": {"kind": "parquet"}, "stages": [
        {"stage": "dedup_exact"},
        {"stage": "model_score", "params": {"model_path": str(models["regression"]), "column": column, "max_tokens": 48}},
    ]})  # fmt: skip


def scores_by_id(folder: Path, column: str = "edu") -> dict[str, float]:
    table = pq.read_table(folder)
    return dict(zip(table["id"].to_pylist(), table[column].to_pylist()))


@pytest.mark.slow
def test_curate_run_on_two_workers_gives_transformers_scores_whatever_the_sharding(models, tmp_path):
    texts = list(dict.fromkeys(documents(120, seed=4)))
    expected = dict(zip((f"d{i}" for i in range(len(texts))), reference(models["regression"], texts, 48, None)))
    (tmp_path / "recipe.yaml").write_text(recipe_text(models))
    for files, seed in ((3, 0), (1, 1)):
        inputs = write_inputs(tmp_path / f"in-{files}", texts, files, seed)
        out = tmp_path / f"run-{files}"
        done = subprocess.run([sys.executable, "-m", "curation", "run", str(tmp_path / "recipe.yaml"), "--input", inputs,
                               "--output", str(out), "--num-cpus", "2"], capture_output=True, text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        got = scores_by_id(out / "02_model_score")
        assert got.keys() == expected.keys()
        np.testing.assert_allclose([got[k] for k in expected], list(expected.values()), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_on_a_cluster_with_a_gpu_the_stage_runs_alone_in_an_actor_holding_it(models, tmp_path):
    """Ray declares one GPU (none is there: the model stays on the CPU), so the runner writes the part before the
    stage and runs the stage's segments in one actor holding GPU 0; the scores are the same."""
    import ray

    from curation import runner
    from curation.recipe import parse_recipe as parse

    texts = list(dict.fromkeys(documents(50, seed=5)))
    expected = dict(zip((f"d{i}" for i in range(len(texts))), reference(models["regression"], texts, 48, None)))
    write_inputs(tmp_path / "in", texts, 3, 2)
    inputs = sorted(str(p) for p in (tmp_path / "in").glob("docs-*.parquet"))
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        result = runner.run(parse(json.loads(recipe_text(models)), "r.yaml"), inputs, str(tmp_path / "out"), "s")
    finally:
        ray.shutdown()
    assert not result.failures
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    shards = manifest["stages"]["02_model_score"]["shards"]
    assert sorted(s["gpu_ids"] for s in shards.values()) == [["0"]] * 3
    assert len(list((tmp_path / "out" / "01_dedup_exact").glob("part-*.parquet"))) == 3  # the boundary before it
    got = scores_by_id(tmp_path / "out" / "02_model_score")
    np.testing.assert_allclose([got[k] for k in expected], list(expected.values()), atol=1e-5, rtol=0)
