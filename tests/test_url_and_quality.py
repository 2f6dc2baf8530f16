import json

import numpy as np
import pyarrow as pa
import pytest

from curation import quality
from filters.quality import QualityScorer
from filters.url_filter import UrlFilter
from tests.conftest import shared


def test_url_blocklists_match_domains_subdomains_and_substrings(tmp_path):
    domains = tmp_path / "domains.txt"
    domains.write_text("# spam\nbad.example\n\nSHOP.test  # case folded\n")
    stage = UrlFilter(UrlFilter.Params(domain_lists=[str(domains)], substring_lists=["example-url-substrings.txt"]))
    urls = [
        "https://bad.example/page", "http://www.bad.example:8080/x", "https://notbad.example/", "https://Shop.TEST/",
        "https://ok.org/casino/today", "https://ok.org/VIAGRA-now", "https://ok.org/fine", None,
    ]  # fmt: skip
    result = stage.process(pa.table({"id": [str(i) for i in range(len(urls))], "url": urls}))
    assert result.kept["url"].to_pylist() == ["https://notbad.example/", "https://ok.org/fine", None]
    assert result.dropped == {"url_blocked_domain": 3, "url_blocked_substring": 2}


def test_missing_blocklist_is_named():
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        UrlFilter(UrlFilter.Params(domain_lists=["nope.txt"])).setup()


def test_auc_matches_hand_computed_values():
    assert quality.auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert quality.auc([1, 1, 1, 1], [0, 1, 0, 1]) == 0.5
    assert quality.auc([3, 2, 1], [1, 0, 0]) == 1.0


@pytest.fixture(scope="module")
def labelled():
    return quality.read_texts(str(shared("quality/labelled_web_text.jsonl")), label_field="label")


def test_cross_validated_auc_beats_a_length_only_baseline(labelled, capsys):
    model_auc = quality.cross_validate(labelled, folds=5, seed=0)
    shuffled = list(labelled)
    import random

    random.Random(0).shuffle(shuffled)
    length_auc = [quality.auc([len(t) for t, _ in shuffled[f::5]], [lab for _, lab in shuffled[f::5]]) for f in range(5)]
    with capsys.disabled():
        print(f"\nquality classifier, 5-fold CV on labelled_web_text.jsonl ({len(labelled)} docs): "
              f"AUC {np.mean(model_auc):.3f} (folds {np.round(model_auc, 3).tolist()}); "
              f"length-only baseline AUC {np.mean(length_auc):.3f}")  # fmt: skip
    assert np.mean(model_auc) > np.mean(length_auc) + 0.03


def test_scoring_stage_threshold_top_fraction_and_cli(labelled, tmp_path):
    from curation.cli import main

    data = tmp_path / "labelled.jsonl"
    data.write_text("\n".join(json.dumps({"text": t, "label": lab}) for t, lab in labelled))
    model = tmp_path / "model.bin"
    assert main(["quality", "train", "--labelled", str(data), "--out", str(model), "--holdout", "0.2"]) == 0
    assert main(["quality", "eval", "--model", str(model), str(data)]) == 0
    texts = [t for t, _ in labelled[:40]]
    table = pa.table({"id": [str(i) for i in range(40)], "text": texts})
    by_threshold = QualityScorer(QualityScorer.Params(model_path=str(model), threshold=0.5)).process(table)
    scores = np.array(by_threshold.kept["quality_score"].to_pylist() + by_threshold.removed["quality_score"].to_pylist())
    assert by_threshold.kept.num_rows == int((scores >= 0.5).sum())
    assert all(s >= 0.5 for s in by_threshold.kept["quality_score"].to_pylist())
    top = QualityScorer(QualityScorer.Params(model_path=str(model), top_fraction=0.25)).process(table)
    assert top.kept.num_rows == 10 and top.dropped == {"quality_not_top_fraction": 30}
    assert min(top.kept["quality_score"].to_pylist()) >= max(top.removed["quality_score"].to_pylist())


def test_threshold_and_top_fraction_together_is_an_error():
    with pytest.raises(ValueError, match="not both"):
        QualityScorer.Params(model_path="m.bin", threshold=0.5, top_fraction=0.1)
