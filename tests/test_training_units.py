"""Trainer pieces without torchrun: model, schedule, mixture validation, mixture loader."""

import glob
import inspect
import string
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from curation.tokenize import EOS, TOKEN_SCHEMA, train_tokenizer
from training.attention import _sdpa, choose_attention
from training.data import MixtureLoader, choose_sources
from training.mixture import MixtureError, load_mixture
from training.model import MODEL_CONFIGS, Transformer, flops_per_token
from training.schedule import lr_at


def test_tiny_is_about_5m_parameters_and_flops_are_6n_plus_attention():
    model = Transformer(MODEL_CONFIGS["tiny"])
    assert 4.5e6 < model.num_params() < 5.5e6
    config = MODEL_CONFIGS["tiny"]
    assert flops_per_token(config, model.num_params(), 128) == 6 * model.num_params() + 12 * 4 * 256 * 128
    assert model(torch.randint(0, config.vocab_size, (2, 16))).shape == (2, 16, config.vocab_size)


def test_sdpa_grouped_query_attention_matches_repeated_heads():
    q, k, v = torch.randn(2, 5, 4, 8), torch.randn(2, 5, 2, 8), torch.randn(2, 5, 2, 8)
    repeated = _sdpa(q, k.repeat_interleave(2, dim=2), v.repeat_interleave(2, dim=2))
    assert torch.allclose(_sdpa(q, k, v), repeated, atol=1e-6)
    name, _ = choose_attention(torch.device("cpu"), torch.float32)
    assert name.startswith("sdpa")


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
    sequence = stream.sequence(0)
    assert len(sequence) == 65
    order, starts = stream._layout(0)
    first_doc = stream._doc_tokens(order[0])
    head = min(len(first_doc), 65)
    assert (sequence[:head] == first_doc[:head]).all()
    if len(first_doc) < 65:
        assert sequence[len(first_doc)] == eos
    epoch_one = [stream.sequence(k) for k in range(stream.per_epoch, stream.per_epoch + 3)]
    assert not all((a == b).all() for a, b in zip(epoch_one, [stream.sequence(k) for k in range(3)])), "no reshuffle"


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
