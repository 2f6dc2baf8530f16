"""`curate tokenize` over several runs: one tokenizer trained on all of them, every run's shards made with it."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from curation.cli import main
from curation.tokenize import EOS, TOKENIZER_FILE, train_tokenizer
from tests.conftest import interruptible


def curated_run(folder, source: str, texts: list[str], parts: int = 1):
    """A finished `curate run` folder whose final stage holds `texts` in `parts` parts (round robin)."""
    (folder / "01_last").mkdir(parents=True, exist_ok=True)
    for old in (folder / "01_last").glob("part-*.parquet"):
        old.unlink()
    shards = {str(i): {} for i in range(parts)}
    manifest = {"recipe": {"stages": [{"stage": "last"}]}, "inputs": [f"in-{i}.warc.gz" for i in range(parts)],
                "stages": {"00_read": {}, "01_last": {"shards": shards}}}  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest))
    ids = [f"{source}-{i}" for i in range(len(texts))]
    for part in range(parts):
        rows = {"id": ids[part::parts], "source": [source] * len(ids[part::parts]), "text": texts[part::parts]}
        pq.write_table(pa.table(rows), folder / "01_last" / f"part-{part:05d}.parquet")
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


def test_report_and_stats_of_a_token_folder_name_its_run_in_one_line(tmp_path, capsys):
    """RUN/tokens has a stats.json too, of tokens: `curate report` and `curate stats` name the run folder to give."""
    web = curated_run(tmp_path / "web", "web", [f"document {i} of the web" for i in range(50)])
    assert main(["tokenize", web, "--vocab-size", "300", "--num-cpus", "1"]) == 0
    capsys.readouterr()
    for command in ("report", "stats"):
        assert main([command, f"{web}/tokens"]) == 2
        assert capsys.readouterr().err == f"curate: {web}/tokens is a token folder (written by `curate tokenize`), not a run folder: name its run, {web}\n"


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

    run = curated_run(tmp_path / "web", "web", [f"document number {i} about rivers and hills" for i in range(40)], parts=2)
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


def prose(copies: int) -> list[str]:
    """Real prose with code in it (Python's own help topics, 79 documents, 465 kB), `copies` times over, numbered."""
    import pydoc_data.topics

    return [f"{text}\n({copy})" for copy in range(copies) for text in pydoc_data.topics.topics.values()]


def files_of(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def sha256_of(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_one_task_per_part_on_both_workers_then_a_rerun_skips_them_and_a_smaller_input_drops_its_parts(tmp_path, capsys):
    texts = prose(4)
    web = curated_run(tmp_path / "web", "web", texts, parts=32)
    args = ["tokenize", web, "--vocab-size", "600", "--num-cpus", "2"]
    assert main(args) == 0
    tokens = tmp_path / "web" / "tokens"
    part_stats = [json.loads(path.read_text()) for path in sorted((tokens / "parts").glob("part-*.json"))]
    assert [s["part"] for s in part_stats] == [f"part-{i:05d}.parquet" for i in range(32)]
    assert len({s["worker_pid"] for s in part_stats}) >= 2, "one worker ran every part"
    stats = json.loads((tokens / "stats.json").read_text())
    for s in part_stats:
        shard = tokens / s["part"]
        assert s["shard"] == stats["shards"][s["part"]] == {"bytes": shard.stat().st_size, "sha256": sha256_of(shard)}
        assert s["sources"]["web"]["documents"] == pq.read_metadata(shard).num_rows
        assert s["sources"]["web"]["documents"] == pq.read_metadata(tmp_path / "web" / "01_last" / s["part"]).num_rows
        assert s["tokenizer_sha256"] == sha256_of(tokens / TOKENIZER_FILE)
    ids = [i for path in sorted(tokens.glob("part-*.parquet")) for i in pq.read_table(path)["id"].to_pylist()]
    assert sorted(ids) == sorted(f"web-{i}" for i in range(len(texts)))
    assert stats["sources"]["web"]["documents"] == len(texts)
    assert stats["sources"]["web"]["tokens"] == sum(s["sources"]["web"]["tokens"] for s in part_stats)
    capsys.readouterr()

    before = files_of(tokens)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "resumed: 32 part(s) were already tokenized and skipped" in out and "reused tokenizer_sample.json" in out
    assert files_of(tokens) == before

    curated_run(tmp_path / "web", "web", texts[:200], parts=24)  # curated again, from less input
    assert main(args) == 0
    assert "deleted 8 token part(s)" in capsys.readouterr().out
    stats = json.loads((tokens / "stats.json").read_text())
    assert sorted(stats["shards"]) == sorted(p.name for p in tokens.glob("part-*.parquet")) == [f"part-{i:05d}.parquet" for i in range(24)]
    assert len(list((tokens / "parts").glob("*.json"))) == 24
    assert stats["sources"]["web"]["documents"] == 200  # every part redone: its input changed


def test_the_tokenizer_is_trained_on_a_bounded_sample_in_proportion_to_each_run(tmp_path, capsys):
    web = curated_run(tmp_path / "web", "web", prose(6), parts=6)
    code = curated_run(tmp_path / "code", "code", [f"def zebrafish_{i}(x):\n    return zebrafish_{i}(x - 1) * {i}\n" * 40 for i in range(900)], parts=3)
    assert main(["tokenize", web, code, "--vocab-size", "400", "--tokenizer-sample-bytes", "60000", "--num-cpus", "1"]) == 0
    record = json.loads((tmp_path / "web" / "tokens" / "tokenizer_sample.json").read_text())
    assert (tmp_path / "code" / "tokens" / "tokenizer_sample.json").read_text() == json.dumps(record, indent=1, sort_keys=True)
    assert 0.9 * 60000 <= record["bytes"] <= 60000 and record["plan"]["seed"] == 0
    assert record["tokenizer_sha256"] == sha256_of(tmp_path / "web" / "tokens" / TOKENIZER_FILE)
    sizes = {name: sum(len(text.encode()) for text in pq.read_table(tmp_path / name / "01_last")["text"].to_pylist()) for name in ("web", "code")}
    taken = {name: record["runs"][str(tmp_path / name)]["bytes"] for name in ("web", "code")}
    assert 0.8 < (taken["web"] / taken["code"]) / (sizes["web"] / sizes["code"]) < 1.25, (taken, sizes)
    assert record["documents"] == sum(run["documents"] for run in record["runs"].values()) < 900 + 6 * 79
    tokenizer = tmp_path / "given.json"
    tokenizer.write_text((tmp_path / "web" / "tokens" / TOKENIZER_FILE).read_text())
    assert main(["tokenize", web, "--tokenizer", str(tokenizer), "--num-cpus", "1"]) == 0
    assert not (tmp_path / "web" / "tokens" / "tokenizer_sample.json").exists()  # it described another tokenizer's origin
    assert "resumed: 6 part(s)" in capsys.readouterr().out  # the same tokenizer: nothing to redo


@pytest.mark.slow
def test_tokenize_killed_mid_run_resumes_to_the_output_of_an_uninterrupted_run(tmp_path):
    """SIGKILL to the driver's process group (the driver and its Ray) once some parts are written, as the curation
    chaos test does; the rerun skips them and ends with the same token parts and stats as a run never killed."""
    texts = prose(10)
    whole, killed = (curated_run(tmp_path / name, "web", texts, parts=16) for name in ("whole", "killed"))
    command = [sys.executable, "-m", "curation", "tokenize", "--vocab-size", "600", "--num-cpus", "2",
               "--tokenizer-sample-bytes", "200000"]  # fmt: skip
    done = subprocess.run(command + [whole], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    parts = tmp_path / "killed" / "tokens" / "parts"
    process = subprocess.Popen(command + [killed], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None and len(list(parts.glob("*.json"))) < 2:
        time.sleep(0.02)
    assert process.poll() is None, "the run finished before the kill: give it more input"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    finished = len(list(parts.glob("*.json")))
    assert 2 <= finished < 16 and not (tmp_path / "killed" / "tokens" / "stats.json").exists()
    rerun = subprocess.run(command + [killed], capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    skipped = int(re.search(r"resumed: (\d+) part", rerun.stdout).group(1))
    assert finished <= skipped < 16 and "reused tokenizer_sample.json" in rerun.stdout  # a task in flight may end after the kill
    ours, theirs = files_of(tmp_path / "killed" / "tokens"), files_of(tmp_path / "whole" / "tokens")
    assert sorted(ours) == sorted(theirs) and not [name for name in ours if ".tmp-" in name]
    for name in ours:
        if name.startswith("parts/"):
            volatile = ("worker_pid", "seconds", "input")  # input: the other folder's part, same name and size
            mine, other = (json.loads(files[name]) for files in (ours, theirs))
            assert {k: v for k, v in mine.items() if k not in volatile} == {k: v for k, v in other.items() if k not in volatile}
        elif name != "tokenizer_sample.json":  # it names its runs' folders
            assert ours[name] == theirs[name], name
    ids = [i for path in sorted((tmp_path / "killed" / "tokens").glob("part-*.parquet")) for i in pq.read_table(path)["id"].to_pylist()]
    assert sorted(ids) == sorted(f"web-{i}" for i in range(len(texts)))


@pytest.mark.slow
def test_ctrl_c_while_the_tokenizer_trains_stops_at_once_in_one_line(tmp_path):
    """BPE's merges run in Rust without a look at signals: trained in the driver, Ctrl-C waited for them (4-5 s on 4.6
    MB of text here, minutes on the 64 MiB default sample). Trained in a Ray worker, the driver stops from ray.get and
    stopping Ray ends that worker. 300k distinct made-up words keep the merges busy for seconds."""
    import random

    rng = random.Random(0)
    made_up = [" ".join("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 10))) for _ in range(1000))
               for _ in range(300)]  # fmt: skip
    run = curated_run(tmp_path / "web", "web", made_up, parts=4)
    process = interruptible([sys.executable, "-m", "curation", "tokenize", run, "--num-cpus", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline, training = time.monotonic() + 300, []
    while not training and process.poll() is None and time.monotonic() < deadline:
        training = [p for p in psutil.Process(process.pid).children(recursive=True) if _is_training(p)]
        time.sleep(0.02)
    assert training and process.poll() is None, "the tokenizer was not trained in a Ray worker"
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=20)  # not a wait for the merges to end
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines() == ["curate tokenize: stopped; rerun the same command to resume (finished work is kept)"]
    assert not (tmp_path / "web" / "tokens" / TOKENIZER_FILE).exists()
    psutil.wait_procs(training, timeout=20)
    assert not [p for p in training if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _is_training(process) -> bool:
    """A Ray worker runs a task under the title ray::FUNCTION."""
    try:
        return "_train_on_worker" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def test_an_unreadable_part_fails_alone_with_one_line_naming_it_and_train_refuses_the_unfinished_folder(tmp_path, capsys):
    """The part tokenized before with another tokenizer is deleted before the run, not left beside the new ones, and
    the folder (parts/ without stats.json) is refused by the check `train` runs before its first step."""
    from training.mixture import MixtureError, load_mixture

    web = curated_run(tmp_path / "web", "web", prose(1), parts=3)
    old, new = tmp_path / "old.json", tmp_path / "given.json"
    old.write_text(train_tokenizer(prose(1), 400).to_str())
    new.write_text(train_tokenizer(prose(1), 300).to_str())
    assert main(["tokenize", web, "--tokenizer", str(old), "--num-cpus", "1"]) == 0
    (tmp_path / "web" / "01_last" / "part-00001.parquet").write_bytes(b"not parquet at all")
    assert main(["tokenize", web, "--vocab-size", "300"]) == 2  # the tokenizer's sample reads it first
    assert "part-00001.parquet: its text could not be read for the tokenizer's sample" in capsys.readouterr().err
    assert main(["tokenize", web, "--tokenizer", str(new), "--num-cpus", "1"]) == 1
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if "failed" in line]
    assert len(failed) == 2 and "part part-00001.parquet failed:" in failed[0] and "1 part(s) failed" in failed[1]
    tokens = tmp_path / "web" / "tokens"
    assert sorted(p.name for p in tokens.glob("part-*.parquet")) == ["part-00000.parquet", "part-00002.parquet"]
    assert sorted(p.name for p in (tokens / "parts").glob("*.json")) == ["part-00000.json", "part-00002.json"]
    assert not (tokens / "stats.json").exists()  # the run is not finished
    (tmp_path / "mix.yaml").write_text(f"name: m\nsources:\n  web: {{paths: ['{tokens}/part-*.parquet']}}\n")
    with pytest.raises(MixtureError, match=f"{tokens}: `curate tokenize` did not finish here: rerun it"):
        load_mixture(str(tmp_path / "mix.yaml")).check_shards_intact()


def test_a_changed_tokenizer_or_validation_fraction_redoes_every_part(tmp_path, capsys):
    web = curated_run(tmp_path / "web", "web", prose(1), parts=3)
    tokens = tmp_path / "web" / "tokens"
    shards = {}
    for name, vocab, fraction in (("first", 400, "0.01"), ("other tokenizer", 300, "0.01"), ("other fraction", 300, "0.3")):
        tokenizer = tmp_path / f"{vocab}.json"
        tokenizer.write_text(train_tokenizer(prose(1), vocab).to_str())
        capsys.readouterr()
        assert main(["tokenize", web, "--tokenizer", str(tokenizer), "--validation-fraction", fraction, "--num-cpus", "1"]) == 0
        assert "resumed" not in capsys.readouterr().out, name
        stats = json.loads((tokens / "stats.json").read_text())
        assert stats["vocab_size"] == Tokenizer.from_file(str(tokenizer)).get_vocab_size() and stats["validation_fraction"] == float(fraction)
        assert (tokens / TOKENIZER_FILE).read_text() == tokenizer.read_text()
        for part in (tokens / "parts").glob("*.json"):
            recorded = json.loads(part.read_text())
            assert recorded["tokenizer_sha256"] == sha256_of(tokenizer) and recorded["validation_fraction"] == float(fraction)
        shards[name] = stats["shards"]
        assert sorted(shards[name]) == sorted(p.name for p in tokens.glob("part-*.parquet"))
        assert all(shards[name][part]["sha256"] == sha256_of(tokens / part) for part in shards[name])
    for part in shards["first"]:  # every part rewritten each time: none made by the earlier settings survives
        assert len({shards[name][part]["sha256"] for name in shards}) == 3


def test_the_sample_plan_names_a_run_one_way_and_changes_with_the_trainer(monkeypatch):
    from curation import tokenize
    from curation.tokenize import Part, _version, sample_plan

    parts = [Part("runs/web", "runs/web/01_last/part-00000.parquet", 100, "1.5"), Part("runs/code", "runs/code/01_last/part-00000.parquet", 50, "2.5")]
    spelled = [Part("runs/code/", parts[1].path, 50, "2.5"), Part("./runs/web", parts[0].path, 100, "1.5")]
    sizes = {part: part.bytes for part in parts + spelled}
    assert sample_plan(parts, sizes, 1000, 0, 300)["inputs_sha256"] == sample_plan(spelled, sizes, 1000, 0, 300)["inputs_sha256"]
    before = sample_plan(parts, sizes, 1000, 0, 300)
    monkeypatch.setattr(tokenize, "TRAINER_VERSION", tokenize.TRAINER_VERSION + 1)
    assert sample_plan(parts, sizes, 1000, 0, 300) != before
    assert _version({"etag": '"abc"', "size": 3}) == '"abc"' and _version({"last_modified": "2026-01-01"}) == "2026-01-01"
    assert _version({"size": 3}) == ""


def test_tokenize_refuses_a_run_whose_listed_part_is_missing(tmp_path, capsys):
    """The manifest lists every finished part of the final stage: tokenizing what is left would say 'done' on less."""
    run = curated_run(tmp_path / "web", "web", prose(1), parts=3)
    (tmp_path / "web" / "01_last" / "part-00001.parquet").unlink()
    assert main(["tokenize", run, "--vocab-size", "300"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "1 of the 3 parts" in error and "part-00001.parquet" in error
    assert "rerun `curate run`" in error and not (tmp_path / "web" / "tokens").exists()


def test_tokenize_refuses_a_run_that_curate_run_is_writing_naming_its_pid(tmp_path, capsys):
    """A run still being written has unfinished shards; the refusal names the live writer, not a rerun of it."""
    from curation.run_folder import LOCK_FILE
    from shard_contract import folder_lock

    run = curated_run(tmp_path / "web", "web", prose(1), parts=3)
    manifest = json.loads((tmp_path / "web" / "manifest.json").read_text())
    del manifest["stages"]["01_last"]["shards"]["2"]  # the writer is still on its last shard
    (tmp_path / "web" / "manifest.json").write_text(json.dumps(manifest))
    lock = folder_lock.acquire(run, LOCK_FILE, "curate run")
    try:
        assert main(["tokenize", run, "--vocab-size", "300"]) == 2
    finally:
        folder_lock.release(run, lock)
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and f"in use by curate run (pid {os.getpid()} " in error, error
    assert "rerun `curate run`" not in error and not (tmp_path / "web" / "tokens").exists()


def test_train_refuses_a_token_shard_its_stats_list_but_the_folder_lacks(tmp_path, capsys):
    from training.mixture import MixtureError, load_mixture

    run = curated_run(tmp_path / "web", "web", prose(1), parts=3)
    assert main(["tokenize", run, "--vocab-size", "300", "--num-cpus", "1"]) == 0
    tokens = tmp_path / "web" / "tokens"
    (tmp_path / "all.yaml").write_text(f"name: all\nsources:\n  web: {{paths: ['{tokens}/part-*.parquet']}}\n")
    (tmp_path / "two.yaml").write_text(f"name: two\nsources:\n  web: {{paths: ['{tokens}/part-0000[0-1].parquet']}}\n")
    load_mixture(str(tmp_path / "all.yaml")).check_shards_intact()
    (tokens / "part-00002.parquet").unlink()
    with pytest.raises(MixtureError, match=re.escape("1 of the 3 token shards") + ".*part-00002.parquet.*" + re.escape(f"`curate tokenize {tmp_path / 'web'}`")):
        load_mixture(str(tmp_path / "all.yaml")).check_shards_intact()
    load_mixture(str(tmp_path / "two.yaml")).check_shards_intact()  # a pattern that never selected it: nothing is missing
    capsys.readouterr()
    assert main(["tokenize", run, "--vocab-size", "300", "--num-cpus", "1"]) == 0  # the advice works: the part is written again
    assert "resumed: 2 part(s)" in capsys.readouterr().out
    load_mixture(str(tmp_path / "all.yaml")).check_shards_intact()


def test_a_token_part_changed_in_place_is_redone_by_the_next_tokenize(tmp_path, capsys):
    """`train` says to tokenize again; that must redo the part, not skip it because its sidecar still matches."""
    from training.mixture import MixtureError, load_mixture

    run = curated_run(tmp_path / "web", "web", prose(1), parts=2)
    assert main(["tokenize", run, "--vocab-size", "300", "--num-cpus", "1"]) == 0
    shard = tmp_path / "web" / "tokens" / "part-00001.parquet"
    original = shard.read_bytes()
    shard.write_bytes(original[:100] + bytes([original[100] ^ 1]) + original[101:])
    (tmp_path / "mix.yaml").write_text(f"name: m\nsources:\n  web: {{paths: ['{shard.parent}/part-*.parquet']}}\n")
    with pytest.raises(MixtureError, match=re.escape(f"`curate tokenize {tmp_path / 'web'}` redoes it")):
        load_mixture(str(tmp_path / "mix.yaml")).check_shards_intact()
    capsys.readouterr()
    assert main(["tokenize", run, "--vocab-size", "300", "--num-cpus", "1"]) == 0
    assert "resumed: 1 part(s)" in capsys.readouterr().out  # the intact one is skipped, the changed one redone
    assert shard.read_bytes() == original
    load_mixture(str(tmp_path / "mix.yaml")).check_shards_intact()


def test_one_run_tokenized_after_a_joint_tokenize_keeps_the_tokenizer_the_others_share(tmp_path, capsys):
    runs = {name: curated_run(tmp_path / name, name, prose(1)[i::3]) for i, name in enumerate(("web", "code", "rest"))}
    assert main(["tokenize", *runs.values(), "--vocab-size", "500", "--num-cpus", "1"]) == 0
    shared = (tmp_path / "web" / "tokens" / TOKENIZER_FILE).read_text()
    curated_run(tmp_path / "web", "web", prose(2)[::3])  # the web run curated again: its text changed
    capsys.readouterr()
    assert main(["tokenize", runs["web"], "--num-cpus", "1"]) == 0
    out = capsys.readouterr().out
    assert "kept" in out and "code" in out and "rest" in out and "--retrain-tokenizer" in out
    assert (tmp_path / "web" / "tokens" / TOKENIZER_FILE).read_text() == shared
    assert json.loads((tmp_path / "web" / "tokens" / "stats.json").read_text())["vocab_size"] == Tokenizer.from_str(shared).get_vocab_size()

    assert main(["tokenize", runs["web"], "--retrain-tokenizer", "--vocab-size", "400", "--num-cpus", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (tmp_path / "web" / "tokens" / TOKENIZER_FILE).read_text() != shared
    assert f"{tmp_path / 'code'}, {tmp_path / 'rest'}: tokenized with the tokenizer this replaced" in out
    assert f"curate tokenize {runs['web']} {tmp_path / 'code'} {tmp_path / 'rest'}" in out
