"""`curate quality train-model`: a head fitted over a frozen encoder (a BERT-family one, and a decoder as `train export`
writes) is saved as a transformers classifier that scores as it was fitted, through the model_score stage; the CLI
prints held-out Spearman and AUC beside fastText's on the same split."""

import json
import random
import re
import shlex
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml
from transformers import AutoConfig

from curation import quality_model
from curation.cli import main
from curation.recipe import parse_recipe
from filters.model_score import ModelScorer
from tests.test_model_score import WORDS, save_model
from tests.test_perplexity import save_causal_model

GOOD, BAD = WORDS[:18], WORDS[18:]


def labelled(count: int, seed: int = 0) -> list[tuple[str, int]]:
    """Texts whose label (0-5) is how many of their words come from the first half of the vocabulary, in sixths."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        share = rng.random()
        words = [rng.choice(GOOD if rng.random() < share else BAD) for _ in range(rng.randint(8, 30))]
        rows.append((" ".join(words), min(5, int(6 * sum(w in GOOD for w in words) / len(words)))))
    return rows


def scored(folder, texts: list[str], **params) -> np.ndarray:
    stage = ModelScorer(ModelScorer.Params(model_path=str(folder), **params))
    return stage.process(pa.table({"id": [str(i) for i in range(len(texts))], "text": texts})).kept["model_score"].to_numpy()


def test_a_regression_head_on_a_bert_encoder_scores_as_ridge_fitted_it(tmp_path):
    encoder = save_model(tmp_path / "encoder", 1, seed=3)
    rows = labelled(150)
    texts, labels = [t for t, _ in rows], np.array([label for _, label in rows], dtype=float)
    quality_model.train_head(str(encoder), texts, labels.tolist(), "regression", 64, str(tmp_path / "head"))
    model, tokenizer = quality_model.load_for_head(str(encoder), 1)
    features = quality_model.head_features(model, tokenizer, texts, 64)
    x = np.hstack([features, np.ones((len(features), 1))])
    least_squares = x @ np.linalg.lstsq(x, labels, rcond=None)[0]  # ridge's tiny penalty aside, the same fit
    got = scored(tmp_path / "head", texts, max_tokens=64)
    assert np.corrcoef(got, least_squares)[0, 1] > 0.99
    assert np.mean((got - labels) ** 2) < np.var(labels)  # it explains some of the labels it was fitted on


def test_a_class_head_on_a_decoder_over_mean_pooled_states_or_its_last_token(tmp_path):
    """A decoder (as `train export` writes) is fitted on mean-pooled states by default, its intercept in the config,
    which model_score follows; fitted on its last token it scores in plain transformers as in model_score."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    decoder = save_causal_model(tmp_path / "decoder")
    rows = labelled(120, seed=1)
    texts, labels = [t for t, _ in rows], [int(label >= 3) for _, label in rows]
    quality_model.train_head(str(decoder), texts, labels, "classes", 64, str(tmp_path / "mean"))
    config = json.loads((tmp_path / "mean" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForSequenceClassification"] and config["id2label"] == {"0": "0", "1": "1"}
    assert config["score_pooling"] == "mean" and len(config["score_bias"]) == 2
    model, tokenizer = quality_model.load_for_head(str(tmp_path / "mean"), 2)
    logits = quality_model.head_features(model, tokenizer, texts, 64, "mean") @ model.score.weight.detach().numpy().T
    logits += np.array(config["score_bias"])
    expected = np.exp(logits[:, 1]) / np.exp(logits).sum(1)
    np.testing.assert_allclose(scored(tmp_path / "mean", texts, positive_class="1", max_tokens=64), expected, atol=1e-5)
    assert np.mean((expected >= 0.5) == np.array(labels, dtype=bool)) > max(np.mean(labels), 1 - np.mean(labels))

    quality_model.train_head(str(decoder), texts, labels, "classes", 64, str(tmp_path / "last"), pooling="head")
    assert "score_pooling" not in json.loads((tmp_path / "last" / "config.json").read_text())
    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path / "last").eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "last")
    with torch.inference_mode():
        theirs = [plain(**tokenizer(t, truncation=True, max_length=64, return_tensors="pt")).logits.softmax(-1)[0, 1].item()
                  for t in texts[:20]]
    np.testing.assert_allclose(scored(tmp_path / "last", texts[:20], positive_class="1", max_tokens=64), theirs, atol=1e-5)


def test_the_guides_example_exports_the_encoder_it_trains_a_head_on(tmp_path, monkeypatch):
    """docs/curating.md's two commands as written, on a tiny `train` run and a small labelled file in place of the
    shared corpus: the encoder folder the second reads is the one the first writes."""
    import pyarrow.parquet as pq

    from experiments.cli import train_main
    from tests.test_training_units import tiny_run

    guide = (Path(__file__).resolve().parents[1] / "docs" / "curating.md").read_text()
    section = guide[guide.index("### Training a classifier from annotations") :]
    block = section[section.index("```bash\n") + len("```bash\n") : section.index("\n```\n", section.index("```bash\n"))]
    export, train_model = (shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines())
    assert export[:2] == ["train", "export"] and train_model[:3] == ["curate", "quality", "train-model"]
    assert train_model[train_model.index("--encoder") + 1] == export[export.index("--out") + 1]
    monkeypatch.chdir(tmp_path)
    rows = labelled(120, seed=2)
    tiny_run(Path(export[export.index("--checkpoint") + 1]), [text for text, _ in rows])
    pq.write_table(pa.table({"text": [t for t, _ in rows], "score": [s for _, s in rows]}), "labelled.parquet")
    train_model[train_model.index("--labelled") + 1] = "labelled.parquet"
    assert train_main(export[1:]) == 0
    assert main(train_model[1:]) == 0
    assert json.loads(Path(train_model[train_model.index("--out") + 1], "config.json").read_text())["architectures"] == [
        "LlamaForSequenceClassification"]  # fmt: skip


def test_the_cli_prints_held_out_spearman_and_auc_beside_fasttext(tmp_path, capsys):
    encoder = save_model(tmp_path / "encoder", 1, seed=4)
    rows = labelled(200, seed=2)
    data = tmp_path / "labelled.jsonl"
    data.write_text("\n".join(json.dumps({"text": t, "score": s}) for t, s in rows + rows[:20]))
    assert main(["quality", "train-model", "--labelled", str(data), "--label-field", "score", "--encoder", str(encoder),
                 "--out", str(tmp_path / "edu"), "--max-tokens", "64"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    distinct = len({t for t, _ in rows})
    assert f"220 labelled documents, {distinct} distinct" in printed
    assert "head on the encoder" in printed and "fastText, same split" in printed and "AUC of label >= 3" in printed
    interval = r"\[-?\d\.\d{3}, -?\d\.\d{3}\]"  # `(-0.045-0.509)` read as a subtraction
    assert len(re.findall(rf"Spearman -?\d\.\d{{3}} {interval}   AUC of label >= 3: \d\.\d{{3}} {interval}\n", printed)) == 2
    assert (tmp_path / "edu" / "config.json").exists() and (tmp_path / "edu" / "tokenizer.json").exists()
    assert main(["quality", "train-model", "--labelled", str(data), "--label-field", "score", "--encoder",
                 str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")]) == 2  # fmt: skip
    assert capsys.readouterr().err.strip() == f"curate: encoder folder not found: {tmp_path / 'nowhere'}"


def test_for_a_class_head_the_cli_prints_the_stage_with_its_positive_class_quoted(tmp_path, capsys):
    """Labels 1-3 make classes "1", "2", "3" at indices 0-2: the printed stage names the top class as a quoted label,
    which loads as it reads."""
    encoder = save_model(tmp_path / "encoder", 3, seed=4)  # its head already has the three outputs the fit replaces
    data = tmp_path / "labelled.jsonl"
    data.write_text("\n".join(json.dumps({"text": t, "label": 1 + label // 2}) for t, label in labelled(120, seed=3)))
    out = tmp_path / "classes"
    assert main(["quality", "train-model", "--labelled", str(data), "--encoder", str(encoder), "--out", str(out),
                 "--task", "classes", "--positive-from", "2", "--max-tokens", "64"]) == 0  # fmt: skip
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("classifier -> "))
    assert line == f"classifier -> {out} (model_score: {{model_path: {out}, positive_class: '3'}})"
    params = yaml.safe_load(line.split("model_score: ", 1)[1][:-1])
    stage = parse_recipe({"name": "q", "stages": [{"stage": "model_score", "params": params}]}, "q.yaml").build(0)
    assert stage.params.positive_class == "3" and stage.params.positive_index(AutoConfig.from_pretrained(out)) == 2
