"""Trainer pieces without torchrun: model, schedule, mixture validation, mixture loader."""

import glob
import inspect
import json
import math
import os
import re
import socket
import string
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from pydantic import ValidationError

from curation.tokenize import EOS, train_tokenizer
from shard_contract import TOKEN_SCHEMA
from training.attention import _sdpa, choose_attention
from training.data import MixtureLoader, choose_sources
from training.mixture import MixtureError, PhaseShape, load_mixture
from training.model import MODEL_CONFIGS, Transformer, flops_per_token
from training.schedule import lr_at


def test_tiny_is_about_5m_parameters_and_flops_are_6n_plus_attention():
    model = Transformer(MODEL_CONFIGS["tiny"])
    assert 4.5e6 < model.num_params() < 5.5e6
    config = MODEL_CONFIGS["tiny"]
    assert flops_per_token(config, model.num_params(), 128) == 6 * model.num_params() + 12 * 4 * 256 * 128
    assert model(torch.randint(0, config.vocab_size, (2, 16))).shape == (2, 16, config.vocab_size)


def test_the_guide_gives_the_tiny_models_size_at_the_vocabulary_curate_tokenize_trains():
    """docs/training.md's figure is what `train` logs for the README's first command: tiny at `curate tokenize`'s default
    vocabulary."""
    import re

    from curation.cli import _parser as curate_parser
    from training.config import load_config

    readme = " ".join((Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text().split())
    stated = re.search(r"the `tiny` model \(([\d.]+)M parameters at the ([\d,]+)-token vocabulary `curate tokenize` trains", readme)
    assert stated, "docs/training.md no longer states the tiny model's size with its vocabulary"
    vocab = int(stated.group(2).replace(",", ""))
    assert vocab == curate_parser().parse_args(["tokenize", "runs/x"]).vocab_size
    with torch.device("meta"):
        params = Transformer(load_config("tiny").model_config_for(vocab)).num_params()
    assert f"{params / 1e6:.1f}" == stated.group(1)


def test_sdpa_grouped_query_attention_matches_repeated_heads():
    q, k, v = torch.randn(2, 5, 4, 8), torch.randn(2, 5, 2, 8), torch.randn(2, 5, 2, 8)
    repeated = _sdpa(q, k.repeat_interleave(2, dim=2), v.repeat_interleave(2, dim=2))
    assert torch.allclose(_sdpa(q, k, v), repeated, atol=1e-6)
    name, _ = choose_attention(torch.device("cpu"), torch.float32)
    assert name.startswith("sdpa, PyTorch's choice")


@pytest.mark.parametrize(
    "kernel, message",
    [("sdpa-flash", "SDPA backends are chosen on CUDA"), ("flash_attn", "sdpa-flash is PyTorch's FlashAttention"), ("fa9", "is not one of")],
)
def test_attention_kernels_that_cannot_run_here_say_why(kernel, message):
    with pytest.raises(ValueError, match=message):
        choose_attention(torch.device("cpu"), torch.bfloat16, kernel)


def test_gpu_check_dry_run_prints_its_plan_without_a_gpu():
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--dry-run"], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[1], timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "runs: sdpa-flash, sdpa-flash + compile, sdpa-cudnn, sdpa-cudnn + compile" in done.stdout
    assert "fp8 rowwise vs bf16, fp8 tensorwise vs bf16, FSDP 2 vs TP 2, PP 2" in done.stdout
    assert "load with torch alone" in done.stdout


def test_training_imports_nothing_from_curation_or_ray():
    """So `train` runs where only torch is (a GPU image without Ray)."""
    import subprocess
    import sys

    code = ("import sys, training.cli, training.trainer, training.export, training.data, training.storage; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('curation', 'filters', 'ray')))")  # fmt: skip
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def test_attention_is_causal():
    model = Transformer(MODEL_CONFIGS["tiny"]).eval()
    tokens = torch.randint(0, 8192, (1, 12))
    changed = tokens.clone()
    changed[0, 8:] = 7
    with torch.no_grad():
        assert torch.allclose(model(tokens)[0, :8], model(changed)[0, :8], atol=1e-5)


def test_schedules():
    kw = dict(peak=1.0, min_lr=0.1, warmup=10, total=100)
    assert lr_at(0, **kw) == pytest.approx(0.1) and lr_at(9, **kw) == pytest.approx(1.0)
    assert lr_at(100, **kw) == pytest.approx(0.1) and lr_at(55, **kw) == pytest.approx(0.55)
    assert lr_at(50, kind="wsd", decay_frac=0.2, **kw) == 1.0
    assert lr_at(90, kind="wsd", decay_frac=0.2, **kw) == pytest.approx(0.55)


def test_spike_detector_flags_outliers_and_nan_only():
    from training.metrics import SpikeDetector

    detect = SpikeDetector(sigma=4.0, window=20, warmup=10)
    assert [detect(3.0 + 0.01 * (i % 3)) for i in range(15)] == [None] * 15
    assert detect(3.02) is None and detect(9.0) == "spike" and detect(float("nan")) == "nan"


def test_deficit_sampling_is_exact_at_every_prefix():
    counts = [0, 0, 0]
    picks = choose_sources(counts, [0.7, 0.2, 0.1], 1000)
    for n in (10, 100, 1000):
        share = np.bincount(picks[:n], minlength=3) / n
        assert np.abs(share - [0.7, 0.2, 0.1]).max() <= 1 / n + 1e-9


@pytest.fixture(scope="module")
def three_sources(tmp_path_factory):
    """Token shards of three real sources (stdlib prose, code, names) made with a real BPE tokenizer."""
    import pydoc_data.topics

    folder = tmp_path_factory.mktemp("tokens")
    prose = [text for text in pydoc_data.topics.topics.values()]
    code = [inspect.getsource(m) for m in (textwrap, string, glob, inspect)]
    names = [" ".join(sorted(dir(m))) for m in (textwrap, string, glob, np, torch)]
    tokenizer = train_tokenizer(prose + code + names, vocab_size=2048)
    tokenizer.save(str(folder / "tokenizer.json"))
    for name, texts in (("web", prose), ("code", code), ("rest", names)):
        (folder / name).mkdir()
        for part in range(2):
            chunk = texts[part::2]
            encoded = [e.ids for e in tokenizer.encode_batch(chunk)]
            table = pa.table({"id": [f"{name}-{part}-{i}" for i in range(len(chunk))], "source": [name] * len(chunk),
                              "tokens": encoded, "n_tokens": [len(e) for e in encoded]}, schema=TOKEN_SCHEMA)  # fmt: skip
            pq.write_table(table, folder / name / f"part-{part:05d}.parquet")
    mixture = folder / "mix.yaml"
    mixture.write_text(
        f"name: test\ntokenizer: {folder}/tokenizer.json\nsources:\n"
        + "".join(f"  {n}: {{paths: ['{folder}/{n}/part-*.parquet'], weight: {w}}}\n" for n, w in (("web", 0.7), ("code", 0.2), ("rest", 0.1)))
    )  # fmt: skip
    return load_mixture(str(mixture)), tokenizer.token_to_id(EOS)


def loader(mixture, eos, rank=0, world=1, global_batch=8, micro=2):
    return MixtureLoader(mixture, seq_len=64, global_batch=global_batch, micro_batch=micro, rank=rank, world=world, seed=1, eos_id=eos)


def test_mixture_hits_weights_within_2_percent_over_thousands_of_sequences(three_sources):
    mixture, eos = three_sources
    data = loader(mixture, eos, global_batch=16, micro=16)
    seen = np.zeros(3)
    for _ in range(250):  # 4,000 sequences, cycling the small sources through many epochs
        for batch in data.next_step():
            seen += np.bincount(batch.sources.numpy(), minlength=3)
    assert seen.sum() == 4000
    assert np.abs(seen / seen.sum() - [0.7, 0.2, 0.1]).max() < 0.02
    tokens = data.tokens_per_source()
    assert tokens["web"] == seen[0] * 64 and abs(tokens["code"] / sum(tokens.values()) - 0.2) < 0.02


def test_packing_puts_eos_between_documents_and_keeps_their_tokens(three_sources):
    mixture, eos = three_sources
    stream = loader(mixture, eos).streams[0]
    sequence = stream.sequence(0, 0, 64)
    assert len(sequence) == 65
    order, starts = stream._layout(0)
    first_doc = stream._doc_tokens(order[0])
    head = min(len(first_doc), 65)
    assert (sequence[:head] == first_doc[:head]).all()
    if len(first_doc) < 65:
        assert sequence[len(first_doc)] == eos
    epoch_one = [stream.sequence(1, k * 64, 64) for k in range(3)]
    assert not all((a == b).all() for a, b in zip(epoch_one, [stream.sequence(0, k * 64, 64) for k in range(3)])), "no reshuffle"
    assert stream.fit(0, stream.epoch_tokens - 65, 64) == (0, stream.epoch_tokens - 65)
    assert stream.fit(0, stream.epoch_tokens - 64, 64) == (1, 0)  # a window never crosses an epoch's end


def test_ranks_split_the_same_global_batch_and_state_is_rank_agnostic(three_sources):
    mixture, eos = three_sources
    single = loader(mixture, eos)
    ranks = [loader(mixture, eos, rank=r, world=2) for r in range(2)]
    for _ in range(3):
        whole = torch.cat([b.inputs for b in single.next_step()])
        split = torch.cat([b.inputs for r in ranks for b in r.next_step()])
        assert torch.equal(whole, split)
    assert single.state_dict() == ranks[0].state_dict() == ranks[1].state_dict()
    resumed = loader(mixture, eos, rank=0, world=1)
    resumed.load_state_dict(ranks[1].state_dict())
    assert torch.equal(torch.cat([b.inputs for b in resumed.next_step()]), torch.cat([b.inputs for b in single.next_step()]))
    assert all(doc["doc_ids"] for doc in single.last_step_documents())


def test_mixture_errors_name_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: m\nsources:\n  web: {paths: [x], weight: -1}\n")
    with pytest.raises(MixtureError, match=r"sources\.web\.weight"):
        load_mixture(str(bad))
    bad.write_text("name: m\nsources:\n  web: {paths: [x], weight: 1}\nphases:\n  - {name: a, weights: {code: 1}}\n")
    with pytest.raises(MixtureError, match=r"unknown sources \['code'\]"):
        load_mixture(str(bad))
    bad.write_text("name: m\nsources:\n  web: {paths: ['nowhere/*.parquet'], weight: 1}\n")
    with pytest.raises(MixtureError, match="no token shards at"):
        load_mixture(str(bad)).shard_files("web")
    with pytest.raises(MixtureError, match="not found"):
        load_mixture(str(tmp_path / "missing.yaml"))
    bad.write_text("name: m\nsources:\n  web: {paths: [x]}\n  code: {paths: [y]}\nphases:\n  - {name: a, weights: {web: 0.5, code: 0.2}}\n")
    with pytest.raises(MixtureError, match=r"phases\[0\]\.weights sum to 0\.7, not 1"):
        load_mixture(str(bad))
    bad.write_text("name: m\nsources:\n  web: {paths: [x], weight: 0.5}\n  code: {paths: [y], weight: 0.2}\n")
    with pytest.raises(MixtureError, match="weights sum to 0.7, not 1"):
        load_mixture(str(bad))
    bad.write_text("name: m\nsources:\n  web: {paths: [x]}\n  code: {paths: [y]}\n")  # no weights: equal shares
    assert load_mixture(str(bad)).weights() == [0.5, 0.5]


def two_phase(mixture, first: dict):
    """The three-source mixture as a curriculum: web-heavy first, then half code and rest."""
    data = mixture.model_dump()
    data["phases"] = [
        {"name": "web", "weights": {"web": 0.9, "code": 0.1, "rest": 0.0}, **first},
        {"name": "anneal", "weights": {"web": 0.2, "code": 0.5, "rest": 0.3}},
    ]
    return type(mixture).model_validate(data)


@pytest.mark.parametrize("first, switch", [({"tokens": 100 * 16 * 64}, 100), ({"fraction": 0.25}, 50)])
def test_phases_switch_at_their_token_count_with_their_own_proportions(three_sources, first, switch):
    mixture, eos = three_sources
    data = MixtureLoader(two_phase(mixture, first), seq_len=64, global_batch=16, micro_batch=16, rank=0, world=1, seed=1,
                         eos_id=eos, total_steps=200)  # fmt: skip
    seen = {0: np.zeros(3), 1: np.zeros(3)}
    for step in range(200):
        (batch,) = data.next_step()
        assert data.phase == (0 if step < switch else 1), step
        seen[data.phase] += np.bincount(batch.sources.numpy(), minlength=3)
    for phase, target in ((0, [0.9, 0.1, 0.0]), (1, [0.2, 0.5, 0.3])):
        share = seen[phase] / seen[phase].sum()
        print(f"phase {phase}: shares {np.round(share, 4).tolist()} vs {target}")
        assert np.abs(share - target).max() < 0.02


def test_resume_mid_phase_continues_the_same_plan_and_sequences(three_sources):
    mixture, eos = three_sources
    curriculum = two_phase(mixture, {"fraction": 0.5})

    def fresh():
        return MixtureLoader(curriculum, seq_len=64, global_batch=8, micro_batch=4, rank=0, world=1, seed=1, eos_id=eos, total_steps=60)

    whole = fresh()
    steps = [whole.next_step() for _ in range(60)]
    first = fresh()
    for _ in range(20):  # mid first phase
        first.next_step()
    resumed = fresh()
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    for step in range(20, 60):
        for a, b in zip(steps[step], resumed.next_step()):
            assert torch.equal(a.inputs, b.inputs) and torch.equal(a.sources, b.sources), step
    assert resumed.state_dict() == whole.state_dict() and resumed.phase == 1


def test_phase_lengths_and_validation(three_sources):
    mixture, _ = three_sources
    curriculum = two_phase(mixture, {"fraction": 0.25})
    base = PhaseShape(seq_len=10, global_batch=10, micro_batch=10, rope_theta=1e4)
    assert curriculum.scheduled_phase_tokens(10, base) == [300, 700] and curriculum.phase_starts(1000) == [0, 250]
    data = mixture.model_dump()
    data["phases"] = [{"name": "a", "weights": {"web": 1}}, {"name": "b", "weights": {"web": 1}}]
    with pytest.raises(ValidationError, match="every phase but the last needs tokens or fraction"):
        type(mixture).model_validate(data)
    data["phases"][0].update(tokens=10, fraction=0.5)
    with pytest.raises(ValidationError, match="tokens or fraction, not both"):
        type(mixture).model_validate(data)


def test_a_source_can_select_a_bucket_of_its_shards(tmp_path, three_sources):
    mixture, eos = three_sources
    web = sorted(glob.glob(mixture.sources["web"].paths[0]))[0]
    table = pq.read_table(web)
    buckets = ["hq" if i % 3 == 0 else "lq" for i in range(table.num_rows)]
    pq.write_table(table.append_column("bucket", pa.array(buckets)), tmp_path / "part-00000.parquet")
    data = mixture.model_dump()
    data["sources"] = {"web_hq": {"paths": [str(tmp_path / "*.parquet")], "where": {"column": "bucket", "equals": "hq"}}}
    data["phases"] = []
    selected = MixtureLoader(type(mixture).model_validate(data), seq_len=64, global_batch=2, micro_batch=2, rank=0, world=1, seed=1, eos_id=eos)
    hq_ids = {i for i, b in zip(table["id"].to_pylist(), buckets) if b == "hq"}
    assert set(selected.streams[0].doc_ids) == hq_ids
    data["sources"]["web_hq"]["where"] = {"column": "quality_score", "min": 0.5}
    with pytest.raises(ValueError, match="has no column 'quality_score' to select by"):
        MixtureLoader(type(mixture).model_validate(data), seq_len=64, global_batch=2, micro_batch=2, rank=0, world=1, seed=1, eos_id=eos)


def test_plan_numbers_match_a_hand_count(three_sources, tmp_path):
    from training.plan import over_cap, plan

    mixture, _ = three_sources
    curriculum = two_phase(mixture, {"tokens": 30_000})
    by_hand = {}
    for name in ("web", "code", "rest"):
        tables = [pq.read_table(p) for p in sorted(glob.glob(mixture.sources[name].paths[0]))]
        by_hand[name] = sum(sum(len(t) + 1 for t in table["tokens"].to_pylist()) for table in tables)
    base = PhaseShape(seq_len=100, global_batch=10, micro_batch=10, rope_theta=1e4)
    phase_tokens = curriculum.scheduled_phase_tokens(100, base)
    sources = plan(curriculum, phase_tokens)
    assert phase_tokens == [30_000, 70_000]
    asked = {"web": 30_000 * 0.9 + 70_000 * 0.2, "code": 30_000 * 0.1 + 70_000 * 0.5, "rest": 70_000 * 0.3}
    for source in sources:
        assert source.available == by_hand[source.name] and source.asked == round(asked[source.name])
        assert source.epochs == pytest.approx(asked[source.name] / by_hand[source.name])
    by_fraction = two_phase(mixture, {"fraction": 0.3})  # epochs grow linearly with the run
    worst = max(plan(by_fraction, by_fraction.scheduled_phase_tokens(100, base)), key=lambda s: s.epochs)
    message = over_cap(plan(by_fraction, by_fraction.scheduled_phase_tokens(int(100 * 4.5 / worst.epochs), base)))
    assert message and f"source {worst.name!r} would be repeated" in message and "max_epochs 4" in message
    assert over_cap(plan(by_fraction, by_fraction.scheduled_phase_tokens(int(100 * 3.5 / worst.epochs), base))) is None


def test_train_plan_cli_prints_and_fails_over_cap(three_sources):
    import subprocess
    import sys

    mixture, _ = three_sources
    path = glob.glob(mixture.sources["web"].paths[0])[0].rsplit("/", 2)[0] + "/mix.yaml"
    ok = subprocess.run([sys.executable, "-m", "training", "plan", "--mixture", path, "--tokens", "1000"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "tokens available" in ok.stdout and "web" in ok.stdout, ok.stdout + ok.stderr
    over = subprocess.run([sys.executable, "-m", "training", "plan", "--mixture", path, "--chinchilla"], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert over.returncode == 1 and "Chinchilla" in over.stdout and "over its max_epochs" in over.stdout


def test_train_plan_asks_by_default_what_train_would_run(three_sources):
    """Without a budget, `train plan` asks the tokens the matching `train` runs: the config's steps (tiny: 40 x 8 x
    128 tokens), or `--steps`; a sample-sized mixture is not over its cap then."""
    import subprocess
    import sys

    mixture, _ = three_sources
    path = glob.glob(mixture.sources["web"].paths[0])[0].rsplit("/", 2)[0] + "/mix.yaml"
    plan = [sys.executable, "-m", "training", "plan", "--mixture", path]
    default = subprocess.run(plan, capture_output=True, text=True, timeout=300)
    assert default.returncode == 0 and "40,960 tokens" in default.stdout and "--steps 40" in default.stdout, default.stdout
    longer = subprocess.run([*plan, "--config", "tiny", "--steps", "5000"], capture_output=True, text=True, timeout=300)
    assert longer.returncode == 1 and f"{5000 * 8 * 128:,} tokens" in longer.stdout and "over its max_epochs" in longer.stdout


def test_one_tokenizer_check_compares_content_and_old_states_load(three_sources, tmp_path):
    from tokenizers import Tokenizer

    from training.mixture import MixtureError

    mixture, eos = three_sources
    tokenizer = Tokenizer.from_file(mixture.tokenizer_path())
    pretty = tmp_path / "pretty.json"
    tokenizer.save(str(pretty), pretty=True)
    shards = Path(sorted(glob.glob(mixture.sources["web"].paths[0]))[0]).parent
    (shards / "tokenizer.json").write_text(tokenizer.to_str())
    data = mixture.model_dump()
    data["tokenizer"] = str(pretty)
    type(mixture).model_validate(data).check_one_tokenizer()  # same tokenizer, other formatting
    other = train_tokenizer(["completely different text"] * 10, 300)
    (shards / "tokenizer.json").write_text(other.to_str())
    with pytest.raises(MixtureError, match="source 'web' was tokenized with"):
        type(mixture).model_validate(data).check_one_tokenizer()
    (shards / "tokenizer.json").unlink()
    data_loader = loader(mixture, eos, global_batch=8)
    data_loader.load_state_dict({"seed": 1, "seq_len": 64, "phase": 0, "sequences": {"web": 11, "code": 3, "rest": 2}})
    assert data_loader.step == 2 and data_loader.phase_counts == [11, 3, 2]


def test_the_latest_checkpoint_is_the_newest_complete_one_and_each_newer_one_skipped_says_why(tmp_path):
    """A checkpoint is complete when every file its complete.json lists is there with its bytes; one from before the
    marker, as it was then: with its train state and DCP's .metadata. A save's .tmp folder is never a checkpoint."""
    from training.checkpoint import latest

    def step(number: int, files: dict[str, bytes], marker: str | None = None) -> Path:
        folder = tmp_path / f"step-{number:08d}"
        folder.mkdir()
        for name, data in files.items():
            (folder / name).write_bytes(data)
        if marker is not None:
            (folder / "complete.json").write_text(marker)
        return folder

    older = step(1, {"train_state.json": b"{}", ".metadata": b"index"})
    step(2, {"train_state.json": b"{}"})
    step(3, {"train_state.json": b"{}", "__0_0.distcp": b"ab"}, json.dumps({"files": {"train_state.json": 2, "__0_0.distcp": 3}}))
    step(4, {"train_state.json": b"{}"}, json.dumps({"files": {"train_state.json": 2, "__1_0.distcp": 3}}))
    step(5, {}, "{")
    (tmp_path / "step-00000006.tmp").mkdir()
    skipped: list = []
    assert latest(tmp_path, skipped) == older
    assert [(path.name, why) for path, why in skipped] == [
        ("step-00000005", "its complete.json is unreadable"), ("step-00000004", "__1_0.distcp is missing"),
        ("step-00000003", "__0_0.distcp has 2 bytes, complete.json records 3"), ("step-00000002", "no complete.json, and no .metadata"),
    ]  # fmt: skip
    newest = step(10, {"train_state.json": b"{}", "__0_0.distcp": b"abc"}, json.dumps({"files": {"train_state.json": 2, "__0_0.distcp": 3}}))
    assert latest(tmp_path) == newest


def test_train_plan_refuses_a_tokenizer_mismatch_in_the_line_train_refuses_it_with(three_sources, tmp_path):
    """`train plan` runs `train`'s checks of the mixture: a source tokenized with another tokenizer is refused by both
    in the same line (exit 2), where the plan used to print its tables and exit 0."""
    mixture, _ = three_sources
    path = glob.glob(mixture.sources["web"].paths[0])[0].rsplit("/", 2)[0] + "/mix.yaml"
    beside = Path(sorted(glob.glob(mixture.sources["code"].paths[0]))[0]).parent / "tokenizer.json"
    beside.write_text(train_tokenizer(["completely different text"] * 10, 300).to_str())
    commands = {"train plan": ["plan", "--mixture", path], "train": ["--mixture", path, "--steps", "2", "--out", str(tmp_path / "run")]}
    try:
        done = {name: subprocess.run([sys.executable, "-m", "training", *args], capture_output=True, text=True, timeout=300)
                for name, args in commands.items()}  # fmt: skip
    finally:
        beside.unlink()
    for name, result in done.items():
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, (name, result.stdout, result.stderr)
        assert f"source 'code' was tokenized with {beside}" in result.stderr and "Sources" not in result.stdout
    assert done["train plan"].stderr == done["train"].stderr.replace("train: ", "train plan: ", 1)


def test_train_help_names_each_command_in_a_line_and_each_runs():
    """`train --help` lists plan, export and ladder, a line each; each it names answers its own --help (the `train`
    console script's way in: experiments.cli.train_main)."""
    def train(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", f"import sys; from experiments.cli import train_main; sys.exit(train_main({list(args)!r}))"],
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    shown = train("--help")
    assert shown.returncode == 0, shown.stderr
    commands = [line.split()[1] for line in shown.stdout.splitlines() if line.startswith("  train ")]
    assert commands == ["plan", "export", "ladder"], shown.stdout
    for command in commands:
        helped = train(command, "--help")
        assert helped.returncode == 0 and helped.stdout.startswith(f"usage: train {command}"), helped.stdout + helped.stderr


def test_held_out_slice_is_by_id_hash_never_trained_on_and_the_same_for_every_seed(three_sources, tmp_path):
    from training.data import ValidationSet
    from shard_contract import SPLIT_COLUMN, held_out

    mixture, eos = three_sources
    ids = [f"doc-{i}" for i in range(20_000)]
    share = sum(held_out(i, 0.05) for i in ids) / len(ids)
    assert abs(share - 0.05) < 0.005
    # the same ids in other processes (another hash seed: Python's hash() would differ there) are held out alike
    here = [held_out(i, 0.05) for i in ids[:2000]]
    for hash_seed in ("1", "2"):
        other = subprocess.run([sys.executable, "-c", "import json, sys; from shard_contract import held_out; "
                                f"print(json.dumps([held_out(f'doc-{{i}}', 0.05) for i in range(2000)]))"],
                               env={**os.environ, "PYTHONHASHSEED": hash_seed}, capture_output=True, text=True, check=True)  # fmt: skip
        assert json.loads(other.stdout) == here
    for name in ("web", "code"):  # mark a third of two sources' documents held out, as `curate tokenize` does
        (tmp_path / name).mkdir()
        for path in sorted(glob.glob(mixture.sources[name].paths[0])):
            table = pq.read_table(path)
            split = ["validation" if i % 3 == 0 else "train" for i in range(table.num_rows)]
            pq.write_table(table.append_column(SPLIT_COLUMN, pa.array(split)), tmp_path / name / Path(path).name)
    data = mixture.model_dump()
    data["sources"]["web"]["paths"] = [str(tmp_path / "web" / "*.parquet")]
    data["sources"]["code"]["paths"] = [str(tmp_path / "code" / "*.parquet")]
    data["sources"]["rest"]["validation_paths"] = [mixture.sources["rest"].paths[0].replace("part-*", "part-00001")]
    marked = type(mixture).model_validate(data)
    held = {name: set(ValidationSet(marked, eos, 4).streams[name].doc_ids) for name in marked.source_names()}
    assert held["web"] and held["code"] and held["rest"]
    trained_by_seed = []
    for seed in (1, 2):  # the training seed orders the documents; it never moves one into or out of the held-out slice
        trained = MixtureLoader(marked, seq_len=64, global_batch=8, micro_batch=2, rank=0, world=1, seed=seed, eos_id=eos)
        trained_by_seed.append({name: set(stream.doc_ids) for name, stream in zip(trained.names, trained.streams)})
        assert all(not held[name] & trained_by_seed[-1][name] for name in trained.names if name != "rest")
    assert trained_by_seed[0] == trained_by_seed[1]
    first = ValidationSet(marked, eos, 4).batches(64, 2, rank=0, world=1)
    again = ValidationSet(marked, eos, 4).batches(64, 2, rank=0, world=1)
    assert [b.inputs.tolist() for b in first] == [b.inputs.tolist() for b in again]
    assert sorted(set(torch.cat([b.sources for b in first]).tolist())) == [0, 1, 2]
    ranks = [ValidationSet(marked, eos, 3).batches(64, 2, rank=r, world=2) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1])  # every rank runs as many forwards: FSDP gathers in each
    padding = torch.cat([b.sources for r in ranks for b in r])
    assert (padding == 3).sum() == 1 and (padding < 3).sum() == 9  # 9 sequences on 2 ranks: one padding row
    assert ValidationSet(marked, eos, 4).fingerprint == ValidationSet(marked, eos, 1).fingerprint
    # `validation: named` scores only the named shards; the source's own held-out rows stay out of training
    data["sources"]["web"] |= {"validation_paths": data["sources"]["rest"]["validation_paths"], "validation": "named"}
    named = type(mixture).model_validate(data)
    rest_part = set(ValidationSet(named, eos, 4).streams["rest"].doc_ids)
    assert set(ValidationSet(named, eos, 4).streams["web"].doc_ids) == rest_part and not rest_part & held["web"]
    assert not held["web"] & set(loader(named, eos).streams[0].doc_ids)
    data["sources"]["web"]["validation_paths"] = []
    with pytest.raises(ValueError, match="validation: named needs validation_paths"):
        type(mixture).model_validate(data)


def test_a_longer_context_phase_continues_every_stream_and_resumes(three_sources):
    mixture, eos = three_sources
    data = mixture.model_dump()
    data["phases"] = [
        {"name": "short", "weights": {"web": 0.7, "code": 0.2, "rest": 0.1}, "tokens": 6 * 8 * 64},
        {"name": "long", "weights": {"web": 0.7, "code": 0.2, "rest": 0.1}, "seq_len": 256, "global_batch": 4,
         "rope_theta": 5e5, "rope_scaling": {"kind": "yarn", "factor": 4}},
    ]  # fmt: skip
    extended = type(mixture).model_validate(data)
    base = PhaseShape(64, 8, 2, 1e4)
    shapes = extended.shapes(base)
    assert [(s.seq_len, s.global_batch, s.micro_batch, s.rope_theta) for s in shapes] == [(64, 8, 2, 1e4), (256, 4, 2, 5e5)]
    assert shapes[1].rope_scaling["original_seq_len"] == 64 and extended.phase_start_steps(10, base) == [0, 6]
    assert extended.scheduled_phase_tokens(10, base) == [6 * 512, 4 * 1024]

    def fresh():
        return MixtureLoader(extended, seq_len=64, global_batch=8, micro_batch=2, rank=0, world=1, seed=1, eos_id=eos, total_steps=10)

    whole = fresh()
    steps = [whole.next_step() for _ in range(10)]
    assert [tuple(steps[i][0].inputs.shape) for i in (0, 5, 6, 9)] == [(2, 64), (2, 64), (2, 256), (2, 256)]
    assert sum(whole.tokens_per_source().values()) == 6 * 512 + 4 * 1024
    web = whole.streams[0]  # the long phase starts where the short one left each stream: no token lost or repeated
    short_web = [seq for step in steps[:6] for b in step for s, seq in zip(b.sources, b.inputs) if s == 0]
    long_web = [seq for step in steps[6:] for b in step for s, seq in zip(b.sources, b.inputs) if s == 0]
    assert torch.equal(long_web[0][:64], torch.from_numpy(web.sequence(0, 64 * len(short_web), 64)[:-1]))
    for resume_at in (4, 7):  # before the switch and after it
        first = fresh()
        for _ in range(resume_at):
            first.next_step()
        resumed = fresh()
        resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
        for step in range(resume_at, 10):
            assert all(torch.equal(a.inputs, b.inputs) for a, b in zip(steps[step], resumed.next_step())), (resume_at, step)
    other = MixtureLoader(mixture, seq_len=64, global_batch=8, micro_batch=2, rank=0, world=1, seed=1, eos_id=eos)
    with pytest.raises(ValueError, match=r"sequence lengths per phase \[64, 256\], not \[64\]"):
        other.load_state_dict(whole.state_dict())


def test_skipped_documents_leave_the_stream_and_the_rest_keep_their_order(three_sources):
    mixture, eos = three_sources
    data = loader(mixture, eos)
    stream = data.streams[0]
    before = stream.doc_ids_of(0, 0, stream.epoch_tokens - 1)  # the whole epoch, in order
    stream.skip([before[1]])
    after = stream.doc_ids_of(0, 0, stream.epoch_tokens - 1)
    assert before[1] not in after and after[:1] == before[:1] and after[1:3] == before[2:4]
    data.next_step()
    state = json.loads(json.dumps(data.state_dict()))
    assert state["skipped"] == {"web": [before[1]]}
    resumed = loader(mixture, eos)
    resumed.load_state_dict(state)
    assert resumed.streams[0].skipped == {before[1]} and resumed.streams[0].epoch_tokens == stream.epoch_tokens


@pytest.mark.parametrize("scaling", [None, {"kind": "linear", "factor": 4.0},
                                     {"kind": "yarn", "factor": 4.0, "original_seq_len": 128, "beta_fast": 32, "beta_slow": 1}])
def test_rope_scaling_matches_transformers(scaling):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from training.rope import hf_rope_scaling, inverse_frequencies

    config = LlamaConfig(hidden_size=512, num_attention_heads=8, num_key_value_heads=2, rope_theta=5e5,
                         max_position_embeddings=512, rope_scaling=hf_rope_scaling(scaling))  # fmt: skip
    kind = config.rope_parameters["rope_type"]
    theirs, their_factor = (ROPE_INIT_FUNCTIONS[kind](config, "cpu") if kind != "default"
                            else (1.0 / 5e5 ** (torch.arange(0, 64, 2).float() / 64), 1.0))  # fmt: skip
    ours, our_factor = inverse_frequencies(64, 5e5, scaling)
    assert torch.allclose(ours, theirs, rtol=1e-6) and our_factor == pytest.approx(their_factor)


def test_a_step_log_line_stays_one_line_in_a_log_file(capsys):
    from training.metrics import ProgressLine

    line = ProgressLine(total=40, done=0)
    step = "step     40/40  loss 6.5293 (web 6.529 code 5.118 rest 7.220)  val 6.4195  lr 1.65e-03  grad 1.629  514 tok/s  MFU unknown"
    line.print(step)
    line.close()
    assert step + "\n" in capsys.readouterr().out


def test_spike_detector_takes_a_lasting_level_shift_as_the_new_level():
    from training.metrics import SpikeDetector

    detect = SpikeDetector(sigma=4.0, window=20, warmup=10, patience=3)
    for i in range(12):
        detect(3.0 + 0.01 * (i % 3))
    threshold = detect.threshold()
    assert detect(9.0) == "spike" and detect.threshold() == threshold  # a spike stays out of the window
    assert detect(3.01) is None
    assert [detect(6.0) for _ in range(3)] == ["spike", "spike", None] and detect.threshold() == math.inf


def test_the_guide_says_which_spikes_in_a_row_are_acted_on():
    """docs/training.md and the detector agree: the first patience - 1 spikes in a row are spikes (skipped or rewound by
    those policies), the next one is the new level."""
    from training.metrics import SpikeDetector

    patience = inspect.signature(SpikeDetector).parameters["patience"].default
    readme = " ".join((Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text().split())
    assert f"Each spike is acted on as it comes; when {patience} come in a row, the third is taken as a new loss level" in readme
    detect = SpikeDetector(sigma=4.0)
    for i in range(20):
        detect(3.0 + 0.01 * (i % 3))
    assert [detect(6.0) for _ in range(patience)] == ["spike"] * (patience - 1) + [None]


def test_the_guide_quotes_the_loss_parity_bound_the_layouts_are_held_to():
    """tests/test_parallelism.py holds every layout to LOSS_PARITY_RTOL; docs/training.md states that number."""
    from training.parallelize import LOSS_PARITY_RTOL

    guide = " ".join((Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text().split())
    quoted = re.search(r"validation loss per source within (\S+) relative of one rank", guide)
    assert quoted and float(quoted.group(1)) == LOSS_PARITY_RTOL


def test_a_resume_scored_on_another_held_out_slice_is_refused(three_sources, tmp_path):
    import subprocess
    import sys

    mixture, _ = three_sources
    path = glob.glob(mixture.sources["web"].paths[0])[0].rsplit("/", 2)[0] + "/mix.yaml"
    step = tmp_path / "run" / "checkpoints" / "step-00000004"
    step.mkdir(parents=True)
    (step / "train_state.json").write_text(json.dumps({"step": 4, "data": {"seed": 0, "seq_lens": [128]}, "validation": {"web": "0" * 16}}))
    (step / "complete.json").write_text(json.dumps({"files": {"train_state.json": (step / "train_state.json").stat().st_size}}))
    done = subprocess.run([sys.executable, "-m", "training", "--mixture", path, "--steps", "5", "--out", str(tmp_path / "run"),
                           "--resume"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2 and "held-out validation documents of ['code', 'rest', 'web'] differ" in done.stderr, done.stderr


def test_what_train_can_check_before_launch_fails_in_one_line_before_torchrun(three_sources, tmp_path):
    """A global batch that does not split over micro-batches x ranks, an --out that cannot be written, FP8 on a device
    without it, a parallel layout the model or the ranks cannot take, and no ranks at all fail in the launcher with one
    line (exit 2), not in every rank with a torchrun traceback (--ranks 0 used to run 2 ranks)."""
    import subprocess
    import sys

    mixture, _ = three_sources
    path = glob.glob(mixture.sources["web"].paths[0])[0].rsplit("/", 2)[0] + "/mix.yaml"
    (tmp_path / "a-file").write_text("")
    for args, message in (
        (["--global-batch", "6", "--out", str(tmp_path / "run")], "global_batch 6 is not a multiple of micro_batch 2 x ranks 2"),
        (["--out", str(tmp_path / "a-file" / "run")], f"train: cannot write into --out {tmp_path / 'a-file' / 'run'}: "),
        (["--fp8", "rowwise", "--out", str(tmp_path / "fp8")], "train: fp8 rowwise needs a CUDA GPU with FP8 tensor cores"),
        (["--tp", "4"], "train: parallelism.tp 4 does not divide the model's 4 query and 2 key/value heads"),
        (["--pp", "2"], "train: parallelism.pp > 1 needs untied embeddings (--config tiny-untied"),
        (["--config", "tiny-untied", "--pp", "2", "--pp-microbatches", "3"], "parallelism.pp_microbatches 3 does not split the 8"),
        (["--dp-shard", "3", "--ranks", "2"], "does not make the 2 ranks launched"),
        (["--cp", "2"], "train: parallelism.cp > 1: context parallelism is not built yet"),
        (["--ranks", "0"], "train: --ranks 0: give 1 or more processes (or leave it out: the GPUs, else 2)"),
    ):
        done = subprocess.run([sys.executable, "-m", "training", "--mixture", path, "--steps", "2", *args], capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr[-3000:]


def test_z_loss_weight_adds_exactly_its_term_to_the_objective_and_gradients(tmp_path):
    """forward_backward (in a real one-rank gloo group): weight 0 gives cross-entropy's gradients alone; weight w adds
    w x mean(logsumexp(logits)^2) per micro-batch to the objective and its gradient, while the logged loss stays
    the plain cross-entropy and the z-loss sum is the sum of logsumexp^2 over the tokens."""
    from dataclasses import replace
    from types import SimpleNamespace

    import torch.distributed as dist
    import torch.nn.functional as F

    from training.config import Parallelism
    from training.mesh import build
    from training.trainer import Objective, forward_backward

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0, world_size=1)
    try:
        meshes = build(Parallelism().resolve(1), "cpu")
        torch.manual_seed(0)
        model = Transformer(replace(MODEL_CONFIGS["tiny"], vocab_size=64, n_layers=1))
        tokens = torch.randint(0, 64, (2, 2, 17))  # two micro-batches of two sequences
        batches = [SimpleNamespace(inputs=t[:, :-1], targets=t[:, 1:], sources=torch.tensor([0, 1])) for t in tokens]

        def gradients(objective=None, weight=None):
            model.zero_grad(set_to_none=True)
            if objective:
                objective().backward()
                sums = None
            else:
                sums, _ = forward_backward(model, None, batches, 2, torch.device("cpu"), Objective(weight), meshes)
            return sums, torch.cat([p.grad.flatten() for p in model.parameters()])

        def by_hand(term):
            return lambda: sum(term(model(b.inputs).float(), b.targets) for b in batches) / len(batches)

        cross_entropy = by_hand(lambda logits, targets: F.cross_entropy(logits.flatten(0, 1), targets.flatten()))
        log_z_squared = by_hand(lambda logits, _: torch.logsumexp(logits, dim=-1).pow(2).mean())
        _, ce_grad = gradients(cross_entropy)
        _, z_grad = gradients(log_z_squared)
        plain, plain_grad = gradients(weight=0.0)
        weighted, weighted_grad = gradients(weight=0.5)

        assert torch.allclose(plain_grad, ce_grad, rtol=1e-5, atol=1e-7) and plain[-1] == 0
        assert torch.equal(weighted[:-1], plain[:-1])  # the loss logged is cross-entropy alone
        assert plain[:2].sum() / plain[2:4].sum() == pytest.approx(cross_entropy().item(), rel=1e-6)
        with torch.no_grad():
            tokens_z = sum(torch.logsumexp(model(b.inputs).float(), dim=-1).pow(2).sum() for b in batches)
        assert weighted[-1].item() == pytest.approx(tokens_z.item(), rel=1e-6)
        assert z_grad.norm() > 0.01 * ce_grad.norm()  # the term matters, so the check below has teeth
        assert torch.allclose(weighted_grad, ce_grad + 0.5 * z_grad, rtol=1e-5, atol=1e-7)
    finally:
        dist.destroy_process_group()


def test_shuffled_sequences_take_every_window_of_an_epoch_once_in_another_order_and_resume(three_sources):
    mixture, eos = three_sources
    code = type(mixture).model_validate(mixture.model_dump() | {"sources": {"code": mixture.sources["code"].model_dump() | {"weight": 1.0}}, "phases": []})

    def loader(shuffle: bool, steps: int = 400) -> MixtureLoader:
        return MixtureLoader(code, seq_len=64, global_batch=4, micro_batch=4, rank=0, world=1, seed=3, eos_id=eos,
                             total_steps=steps, shuffle_sequences=shuffle)  # fmt: skip

    plain, shuffled = loader(False), loader(True)
    windows = (plain.streams[0].epoch_tokens - 1) // 64
    steps = windows // 4
    seen, documents = {False: [], True: []}, {False: [], True: []}
    for data, key in ((plain, False), (shuffled, True)):
        for _ in range(steps):
            seen[key] += [tuple(row.tolist()) for batch in data.next_step() for row in batch.inputs]
            documents[key].append(len({doc for row in data.last_step_documents() for doc in row["doc_ids"]}))
    every = {tuple(plain.streams[0].sequence(0, 64 * k, 64)[:-1].tolist()) for k in range(windows)}
    assert len(set(seen[True])) == len(seen[True]) == 4 * steps and set(seen[True]) <= every  # the epoch's windows, once
    assert seen[True] != seen[False]
    assert np.mean(documents[True]) > 1.5 * np.mean(documents[False])  # a batch mixes the 4 files instead of one file's run
    first, resumed = loader(True), loader(True)
    for _ in range(10):
        first.next_step()
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert all(torch.equal(a.inputs, b.inputs) for a, b in zip(first.next_step(), resumed.next_step()))
    with pytest.raises(ValueError, match="shuffle_sequences"):
        loader(False).load_state_dict(first.state_dict())
    with pytest.raises(ValueError, match="phases change the sequence length"):
        data = mixture.model_dump()
        data["phases"] = [{"name": "a", "weights": {"web": 1}, "fraction": 0.5}, {"name": "b", "weights": {"web": 1}, "seq_len": 32}]
        MixtureLoader(type(mixture).model_validate(data), seq_len=64, global_batch=4, micro_batch=4, rank=0, world=1, seed=3,
                      eos_id=eos, total_steps=10, shuffle_sequences=True)  # fmt: skip


def test_every_pipeline_schedule_the_config_accepts_is_one_the_pipeline_runs():
    from training.config import PP_SCHEDULES
    from training.pipeline import SCHEDULES

    assert set(PP_SCHEDULES) == set(SCHEDULES)


def test_a_zombie_holding_the_run_lock_is_stale(tmp_path):
    """A killed rank is a zombie until something reaps it (a container's init may never): its lock is taken over,
    while a live holder's is refused (a two-node run resumed on one node was once refused by its dead rank 0)."""
    import psutil

    from training import run_lock

    child = subprocess.Popen([sys.executable, "-c", "pass"])  # never waited for until the end: a zombie
    deadline = time.time() + 60
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
        time.sleep(0.05)
    owner = {"pid": child.pid, "started": psutil.Process(child.pid).create_time(), "host": socket.gethostname()}
    (tmp_path / "train.lock").write_text(json.dumps(owner))
    lock = run_lock.acquire(tmp_path)
    assert json.loads(lock.read_text())["pid"] == os.getpid()
    with pytest.raises(run_lock.RunLocked, match=f"in use by train \\(pid {os.getpid()}"):
        run_lock.acquire(tmp_path)
    run_lock.release(lock)
    child.wait()


def test_read_parquet_reads_the_columns_asked_in_their_order_and_names_a_missing_one(tmp_path):
    """The trainer's reads of token shards, local (memory-mapped) or through fsspec: the columns asked, in that order,
    and a missing column is an error naming the file, as pq.read_table's was."""
    import fsspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    from training.storage import read_parquet

    table = pa.table({"id": ["a", "b"], "n_tokens": [3, 4], "tokens": [[1, 2, 3], [4, 5, 6, 7]]})
    local = str(tmp_path / "part.parquet")
    pq.write_table(table, local)
    with fsspec.open("memory://shards/part.parquet", "wb") as handle:
        pq.write_table(table, handle)
    for path in (local, "memory://shards/part.parquet"):
        assert read_parquet(path, ["n_tokens", "id"]).equals(table.select(["n_tokens", "id"]))
        with pytest.raises(ValueError, match=f"{path} has no column split"):
            read_parquet(path, ["id", "split"])


def tiny_run(run: Path, texts: list[str], config=MODEL_CONFIGS["tiny"]) -> Path:
    """A `train` run folder as `train export` reads it: the tiny model (or `config`) at its first weights in a
    one-rank checkpoint, its model.json and a tokenizer trained on `texts`; returns the checkpoint."""
    import torch.distributed.checkpoint as dcp

    from training import checkpoint
    from training.export import write_model_config

    step = run / "checkpoints" / "step-1"
    dcp.save({"model": Transformer(config).state_dict()}, checkpoint_id=str(step), no_dist=True)
    (step / checkpoint.STATE_FILE).write_text("{}")
    write_model_config(run, config)
    (run / "tokenizer.json").write_text(train_tokenizer(texts, 300).to_str())
    return step


def test_export_into_an_existing_file_is_one_line_naming_it_before_the_checkpoint_is_read(tmp_path, capsys):
    """`train export --out FILE` ended in mkdir's traceback after loading the model; it is refused first."""
    from training.cli import main

    step = tiny_run(tmp_path / "run", ["a few words of text"] * 20)
    (tmp_path / "model.bin").write_text("an earlier export's file")
    for out, where in (("model.bin", "is an existing file"), ("model.bin/hf", f"is inside {tmp_path / 'model.bin'}, an existing file")):
        assert main(["export", "--checkpoint", str(step), "--out", str(tmp_path / out)]) == 2
        assert capsys.readouterr().err == f"train export: --out {tmp_path / out} {where}; name a folder (a missing one is made)\n"
    assert main(["export", "--checkpoint", str(step), "--out", str(tmp_path / "hf")]) == 0 and (tmp_path / "hf" / "config.json").exists()


def test_export_of_a_qk_norm_model_is_refused_in_one_line(tmp_path, capsys):
    """transformers' Llama has no per-head query/key norms: such a run is refused by name, nothing written."""
    from dataclasses import replace

    from training.cli import main

    step = tiny_run(tmp_path / "run", ["a few words of text"] * 20, replace(MODEL_CONFIGS["tiny"], qk_norm=True))
    assert main(["export", "--checkpoint", str(step), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "qk_norm model has no Llama layout" in err and str(tmp_path / "run") in err
    assert not (tmp_path / "hf" / "config.json").exists()


def test_qk_norm_makes_attention_blind_to_the_scale_of_queries_and_keys_and_layouts_refuse_what_they_cannot_shard():
    """With qk_norm each head's queries and keys are normalized before RoPE, so scaling wq and wk changes nothing;
    without it the same scaling changes the logits (the check has teeth). Tensor parallelism refuses it in one line."""
    from dataclasses import replace

    from training.config import Parallelism

    tokens = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(0))
    for qk_norm in (True, False):
        torch.manual_seed(0)
        model = Transformer(replace(MODEL_CONFIGS["tiny"], vocab_size=64, n_layers=2, qk_norm=qk_norm)).eval()
        with torch.no_grad():
            before = model(tokens)
            for block in model.layers.values():
                block.attention.wq.weight.mul_(7.0)
                block.attention.wk.weight.mul_(3.0)
            after = model(tokens)
        assert torch.allclose(before, after, atol=1e-4) == qk_norm, qk_norm
    norms = [name for name, _ in model.named_parameters() if "q_norm" in name or "k_norm" in name]
    assert norms == []  # the last model was built without it
    config = replace(MODEL_CONFIGS["tiny"], qk_norm=True)
    assert {p.shape for n, p in Transformer(config).named_parameters() if n.endswith(("q_norm.weight", "k_norm.weight"))} == {
        torch.Size([config.head_dim])}
    with pytest.raises(ValueError, match="tp > 1 with model_overrides qk_norm"):
        Parallelism(tp=2).check_model(config)


def test_init_std_none_draws_each_matrix_at_one_over_the_square_root_of_its_fan_in():
    """init_std none: every matrix's std is fan_in ** -0.5 (the residual outputs wo and w2 also divided by
    sqrt(2 * layers)); the default keeps GPT-2's fixed 0.02, so both settings are distinguishable at width 256."""
    from dataclasses import replace

    torch.manual_seed(0)
    base = replace(MODEL_CONFIGS["tiny"], vocab_size=512)
    for init_std in (None, 0.02):
        model = Transformer(replace(base, init_std=init_std))
        for name, param in model.named_parameters():
            if param.dim() != 2:
                assert torch.all(param == 1.0), name  # norms start at one
                continue
            expected = init_std or param.shape[1] ** -0.5
            if name.endswith(("wo.weight", "w2.weight")):
                expected /= (2 * base.n_layers) ** 0.5
            assert param.std().item() == pytest.approx(expected, rel=0.05), (init_std, name)
    with pytest.raises(ValueError, match="init_std -1"):
        replace(base, init_std=-1.0)
