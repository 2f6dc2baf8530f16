"""`curate tokenize` over several runs: one tokenizer trained on all of them, every run's shards made with it."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from curation.cli import main
from curation.tokenize import EOS, TOKENIZER_FILE


def curated_run(folder, source: str, texts: list[str]):
    (folder / "01_last").mkdir(parents=True)
    manifest = {"recipe": {"stages": [{"stage": "last"}]}, "inputs": ["in.warc.gz"], "stages": {"00_read": {}, "01_last": {"shards": {"0": {}}}}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    ids = [f"{source}-{i}" for i in range(len(texts))]
    pq.write_table(pa.table({"id": ids, "source": [source] * len(texts), "text": texts}), folder / "01_last" / "part-00000.parquet")
    return str(folder)


def test_several_runs_share_one_tokenizer_trained_on_all(tmp_path, capsys):
    import pydoc_data.topics

    prose = [text for text in pydoc_data.topics.topics.values()][:40]
    web = curated_run(tmp_path / "web", "web", prose[:20])
    code = curated_run(tmp_path / "code", "code", ["def zebrafish_quux(x):\n    return zebrafish_quux(x - 1) * 42\n"] * 30)
    rest = curated_run(tmp_path / "rest", "rest", prose[20:])
    assert main(["tokenize", web, code, rest, "--vocab-size", "2000"]) == 0
    files = [(tmp_path / name / "tokens" / TOKENIZER_FILE).read_text() for name in ("web", "code", "rest")]
    assert files[0] == files[1] == files[2]
    tokenizer = Tokenizer.from_str(files[0])
    assert tokenizer.token_to_id(EOS) is not None
    assert len(tokenizer.encode(" zebrafish_quux").ids) <= 3  # learned from the code run, not only the first one
    for name, count in (("web", 20), ("code", 30), ("rest", 20)):
        shard = pq.read_table(tmp_path / name / "tokens" / "part-00000.parquet")
        assert shard.num_rows == count and set(shard["source"].to_pylist()) == {name}
        first = shard.slice(0, 1).to_pylist()[0]
        assert tokenizer.decode(first["tokens"]) == pq.read_table(tmp_path / name / "01_last")["text"][0].as_py()
    assert "code" in capsys.readouterr().out


def test_a_folder_that_is_not_a_run_is_named(tmp_path, capsys):
    web = curated_run(tmp_path / "web", "web", ["some text here"])
    assert main(["tokenize", web, str(tmp_path / "nothing")]) == 2
    assert "nothing has no manifest.json" in capsys.readouterr().err
    assert not (tmp_path / "web" / "tokens").exists()  # every run is checked before any is written


def test_tokenize_holds_out_a_validation_slice_by_id_hash(tmp_path, capsys):
    from shard_contract import held_out

    texts = [f"document number {i} says something about topic {i % 7}" for i in range(400)]
    web = curated_run(tmp_path / "web", "web", texts)
    assert main(["tokenize", web, "--vocab-size", "300", "--validation-fraction", "0.25"]) == 0
    shard = pq.read_table(tmp_path / "web" / "tokens" / "part-00000.parquet")
    split = dict(zip(shard["id"].to_pylist(), shard["split"].to_pylist()))
    assert all((kind == "validation") == held_out(doc_id, 0.25) for doc_id, kind in split.items())
    held = sum(kind == "validation" for kind in split.values())
    assert 60 < held < 140  # a quarter of 400, by hash
    stats = json.loads((tmp_path / "web" / "tokens" / "stats.json").read_text())
    assert stats["sources"]["web"]["validation_documents"] == held and stats["validation_fraction"] == 0.25
    assert main(["tokenize", web, "--validation-fraction", "1.5"]) == 2 and "not in [0, 1)" in capsys.readouterr().err


def test_train_refuses_a_shard_changed_truncated_or_added_after_tokenize(tmp_path, capsys):
    """`curate tokenize` records each shard's bytes and sha256 in stats.json; the mixture check `train` runs before
    its first step passes on intact shards and names the shard that changed, was cut short, or was never written."""
    import hashlib
    import shutil

    import pytest

    from training.mixture import MixtureError, load_mixture

    run = curated_run(tmp_path / "web", "web", [f"document number {i} about rivers and hills" for i in range(40)])
    (tmp_path / "web" / "01_last" / "part-00001.parquet").write_bytes((tmp_path / "web" / "01_last" / "part-00000.parquet").read_bytes())
    assert main(["tokenize", run, "--vocab-size", "600"]) == 0
    tokens = tmp_path / "web" / "tokens"
    shard = tokens / "part-00001.parquet"
    recorded = json.loads((tokens / "stats.json").read_text())["shards"]
    assert set(recorded) == {"part-00000.parquet", "part-00001.parquet"}
    assert recorded[shard.name] == {"bytes": shard.stat().st_size, "sha256": hashlib.sha256(shard.read_bytes()).hexdigest()}
    (tmp_path / "mix.yaml").write_text(f"name: m\nsources:\n  web: {{paths: ['{tokens}/part-*.parquet']}}\n")
    load_mixture(str(tmp_path / "mix.yaml")).check_shards_intact()

    original = shard.read_bytes()
    shard.write_bytes(original[:-100])  # a half-copied shard
    with pytest.raises(MixtureError, match=f"token shard {shard} changed after `curate tokenize`"):
        load_mixture(str(tmp_path / "mix.yaml")).check_shards_intact()
    shard.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))  # same size, one bit flipped
    with pytest.raises(MixtureError, match="part-00001.parquet changed"):
        load_mixture(str(tmp_path / "mix.yaml")).check_shards_intact()
    shard.write_bytes(original)
    shutil.copy(shard, tokens / "part-00002.parquet")  # a shard curate tokenize never wrote
    with pytest.raises(MixtureError, match="part-00002.parquet is not in"):
        load_mixture(str(tmp_path / "mix.yaml")).check_shards_intact()
    (tokens / "part-00002.parquet").unlink()
    load_mixture(str(tmp_path / "mix.yaml")).check_shards_intact()
