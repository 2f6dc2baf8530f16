"""The model_score stage: scores equal `transformers`' own per-document outputs (a regression head and a 3-class
classifier, tiny random models saved with save_pretrained), in any order and sharding, through `curate run` on Ray
and in an actor holding a GPU where the cluster declares one; bad model folders are one line at recipe load."""

import json
import random
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from curation.recipe import RecipeError, parse_recipe
from filters.model_score import CHARS_PER_TOKEN_BOUND, ModelScorer, length_sorted_batches, padding_parity_rtol

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


def parity_bound(folder: Path) -> float:
    """How close differently padded batches stay to transformers' one-at-a-time scores: relative, and absolute under 1
    (fp32 sums in another order round differently, and differently on another CPU)."""
    from transformers import AutoConfig

    return padding_parity_rtol(AutoConfig.from_pretrained(folder))


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
    bound = parity_bound(models[kind])
    np.testing.assert_allclose(scored["model_score"].to_numpy(), expected, atol=bound, rtol=bound)
    order = np.random.default_rng(1).permutation(len(texts))
    shuffled = stage.process(table_of([texts[i] for i in order])).kept["model_score"].to_numpy()
    np.testing.assert_allclose(shuffled, expected[order], atol=bound, rtol=bound)
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


def test_positive_class_is_a_label_first_and_a_number_that_is_one_label_and_another_index_is_refused(models, tmp_path):
    """Classes labelled "1", "2", "3" (as `curate quality train-model` labels 1-3 scores): `positive_class: 1` once
    scored "2" (index 1) silently."""
    from transformers import AutoConfig

    numbered = tmp_path / "numbered"
    shutil.copytree(models["classes"], numbered)
    config = json.loads((numbered / "config.json").read_text())
    config.update(id2label={"0": "1", "1": "2", "2": "3"}, label2id={"1": 0, "2": 1, "3": 2})
    (numbered / "config.json").write_text(json.dumps(config))
    loaded = AutoConfig.from_pretrained(numbered)
    recipe = "name: n\nstages:\n  - stage: model_score\n    params: {model_path: %s, positive_class: %s}\n"  # YAML reads 1 and '1' apart

    def index_of(positive: str) -> int:
        return parse_recipe(yaml.safe_load(recipe % (numbered, positive)), "n.yaml").build(0).params.positive_index(loaded)

    assert [index_of("'1'"), index_of("'3'"), index_of("3"), index_of("'2'")] == [0, 2, 2, 1]  # 3 is a label, no index
    with pytest.raises(RecipeError) as error:
        index_of("1")
    assert str(error.value) == ("n.yaml: invalid recipe: stages[0].params: positive_class: 1 is both the label '1' "
                                "(index 0) and index 1 (label '2'): quote the label you mean, positive_class: '1' or "
                                "positive_class: '2'")  # fmt: skip
    low_mid_high = AutoConfig.from_pretrained(models["classes"])
    assert ModelScorer.Params(model_path=str(models["classes"]), positive_class=2).positive_index(low_mid_high) == 2


def test_a_missing_dir_name_folder_is_one_line_at_once_and_the_hub_is_never_asked(tmp_path, monkeypatch):
    """`models/edu` shaped like a hub id once went to the hub: 26 s of retries offline, then a message about the
    network. A hub id is read only with `hub: true`."""

    def no_network(*args, **kwargs):
        raise AssertionError("a connection was opened")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.chdir(tmp_path)
    for stage in ("model_score", "perplexity"):
        started = time.monotonic()
        with pytest.raises(RecipeError) as error:
            parse_recipe({"name": "m", "stages": [{"stage": stage, "params": {"model_path": "models/edu"}}]}, "m.yaml")
        assert time.monotonic() - started < 3, stage
        assert str(error.value) == ("m.yaml: invalid recipe: stages[0].params: model folder not found: models/edu "
                                    "(a Hugging Face hub id needs `hub: true`)")  # fmt: skip


CUSTOM_CODE = '''from transformers import BertConfig, BertForSequenceClassification


class CustomBertConfig(BertConfig):
    model_type = "custom-bert"


class CustomBertForSequenceClassification(BertForSequenceClassification):
    config_class = CustomBertConfig
'''


def with_its_own_code(source: Path, folder: Path) -> Path:
    """A copy of a model whose config names classes in a Python file beside it (auto_map), as hub models with custom
    code do: transformers runs that file to load it."""
    shutil.copytree(source, folder)
    (folder / "custom_bert.py").write_text(CUSTOM_CODE)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="custom-bert", architectures=["CustomBertForSequenceClassification"], auto_map={
        "AutoConfig": "custom_bert.CustomBertConfig",
        "AutoModelForSequenceClassification": "custom_bert.CustomBertForSequenceClassification",
    })  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_model_that_ships_code_is_refused_in_one_line_unless_the_stage_trusts_it(models, tmp_path, monkeypatch):
    """Unasked, transformers stops at a terminal prompt and waits (here: a prompt fails the test at once)."""
    monkeypatch.setattr("builtins.input", lambda *args: pytest.fail("transformers asked on the terminal"))
    folder = with_its_own_code(models["regression"], tmp_path / "custom")
    with pytest.raises(RecipeError) as error:
        parse_recipe({"name": "m", "stages": [{"stage": "model_score", "params": {"model_path": str(folder)}}]}, "m.yaml")
    assert str(error.value) == (f"m.yaml: invalid recipe: stages[0].params: {folder} ships code that runs when it loads "
                                "(auto_map in its config.json): set `trust_remote_code: true` in the stage if you trust it")  # fmt: skip
    texts = documents(12, seed=6)
    trusted = ModelScorer(ModelScorer.Params(model_path=str(folder), trust_remote_code=True, max_tokens=48))
    scores = trusted.process(table_of(texts)).kept["model_score"].to_numpy()
    assert type(trusted.model).__name__ == "CustomBertForSequenceClassification"
    bound = parity_bound(models["regression"])
    np.testing.assert_allclose(scores, reference(models["regression"], texts, 48, None), atol=bound, rtol=bound)


def save_roberta(folder: Path, tokenizer_folder: Path) -> Path:
    """A tiny RoBERTa regressor with 18 positions numbered from pad_token_id + 1 (0 here), so 17 tokens fit, and a
    tokenizer that gives no model_max_length (as FacebookAI/roberta-base's 514 positions hold 512)."""
    import torch
    from transformers import AutoTokenizer, RobertaConfig, RobertaForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    config = RobertaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=18, pad_token_id=tokenizer.pad_token_id,
                           num_labels=1, initializer_range=0.5)  # fmt: skip
    torch.manual_seed(2)
    RobertaForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_roberta_model_reads_the_tokens_its_positions_hold(models, tmp_path):
    """max_tokens above its positions once failed with "index 18 is out of bounds" (514 for roberta-base)."""
    folder = save_roberta(tmp_path / "roberta", models["regression"])
    texts = [" ".join(WORDS), *documents(6, seed=7)]
    stage = ModelScorer(ModelScorer.Params(model_path=str(folder), max_tokens=100))
    scores = stage.process(table_of(texts)).kept["model_score"].to_numpy()
    assert stage.max_tokens == 17
    bound = parity_bound(folder)
    np.testing.assert_allclose(scores, reference(folder, texts, 17, None), atol=bound, rtol=bound)


def test_a_huge_document_is_cut_to_what_max_tokens_can_use_before_it_is_tokenized(models, monkeypatch):
    """A 26 MB page was tokenized whole (40 s) to keep its first 512 tokens; its score is the same cut first."""
    huge = " ".join(documents(4000, seed=8))
    stage = ModelScorer(ModelScorer.Params(model_path=str(models["regression"]), max_tokens=48))
    stage.ready()
    lengths: list[int] = []
    tokenize = type(stage.tokenizer).__call__

    def measured(tokenizer, texts, **options):
        lengths.extend(len(text) for text in texts)
        return tokenize(tokenizer, texts, **options)

    monkeypatch.setattr(type(stage.tokenizer), "__call__", measured)
    scores = stage.process(table_of([huge, "the river"])).kept["model_score"].to_numpy()
    assert len(huge) > 500_000 and max(lengths) == 48 * CHARS_PER_TOKEN_BOUND
    monkeypatch.undo()
    bound = parity_bound(models["regression"])
    np.testing.assert_allclose(scores, reference(models["regression"], [huge, "the river"], 48, None), atol=bound, rtol=bound)


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
        bound = parity_bound(models["regression"])
        np.testing.assert_allclose([got[k] for k in expected], list(expected.values()), atol=bound, rtol=bound)


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
    bound = parity_bound(models["regression"])
    np.testing.assert_allclose([got[k] for k in expected], list(expected.values()), atol=bound, rtol=bound)
