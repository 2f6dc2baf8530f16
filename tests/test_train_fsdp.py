"""`train` for real: torchrun with 2 CPU ranks (gloo), FSDP2, on token shards made by `curate run` + `curate tokenize`."""

import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shard_contract import TOKEN_SCHEMA
from tests.conftest import TRAIN_SETTINGS as SETTINGS
from tests.conftest import run
from training import metrics

pytestmark = pytest.mark.slow




PHASED = ["training", "--mixture", "two.yaml", "--config", "settings.yaml", "--steps", "12", "--checkpoint-every", "4",
          "--eval-every", "4"]  # fmt: skip


@pytest.fixture(scope="module")
def phased_run(workdir) -> Path:
    """An uninterrupted 2-rank run of the two-phase curriculum: the kill-and-resume test's reference, and the 2-rank
    checkpoint the export test exports (one launch fewer)."""
    run(*PHASED, "--out", "whole", cwd=workdir)
    return workdir / "whole"


def kill_at_checkpoint(workdir: Path, command: list[str], out: str, step: int) -> int:
    """Run `command` into `out` and SIGKILL it as soon as its step-`step` checkpoint is complete, asserting the kill
    landed mid-run: the run still going when killed and short of its last step's checkpoint. Returns the step of the
    newest checkpoint it left, the one a resume must start from."""
    process = subprocess.Popen([sys.executable, "-m", *command, "--out", out], cwd=workdir,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    checkpoints = workdir / out / "checkpoints"
    deadline = time.time() + 600
    while not (checkpoints / f"step-{step:08d}" / "train_state.json").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    running = process.poll() is None
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert running, f"the run ended (exit {process.returncode}) before it was killed"
    assert (checkpoints / f"step-{step:08d}" / "train_state.json").exists(), "the run was killed before its checkpoint"
    last = int(command[command.index("--steps") + 1])
    reached = max(checkpoint_steps(workdir / out))
    assert reached < last, f"the run saved its last step's checkpoint (step {last}) before the kill"
    return reached


def resume(command: list[str], out: str, workdir: Path, step: int) -> None:
    """`--resume` a killed run, asserting it started from its step-`step` checkpoint (not over, nor as a no-op)."""
    done = run(*command, "--out", out, "--resume", cwd=workdir)
    assert f"resumed from step-{step:08d}" in done.stdout, done.stdout[-3000:]


def losses(out: Path) -> dict[int, float]:
    frame = metrics.load(str(out)).drop_duplicates("step", keep="last")
    return dict(zip(frame.step, frame.loss))


def test_a_damaged_checkpoint_is_skipped_in_one_line_and_a_resume_keeps_each_steps_record_once(workdir):
    """Checkpoints at steps 1-3, then step 3's rank-1 shard cut in half (a half copy) and step 2's rank-0 shard
    deleted: --resume names each in one line, resumes from step 1 (exit 0, no traceback), replays steps 2-3 with the
    first run's losses, and its save at step 3 replaces the damaged one. metrics.jsonl then holds each step once, as
    does a fresh start's after the checkpoints are gone: a run never logs beside another's records."""
    from training import checkpoint

    common = ["training", "--mixture", "two.yaml", "--config", "settings.yaml", "--checkpoint-every", "1", "--out", "damaged"]
    run(*common, "--steps", "3", cwd=workdir)
    first = losses(workdir / "damaged")
    folder = workdir / "damaged" / "checkpoints"
    shard = folder / "step-00000003" / "__1_0.distcp"
    size = shard.stat().st_size
    os.truncate(shard, size // 2)
    (folder / "step-00000002" / "__0_0.distcp").unlink()
    done = run(*common, "--steps", "4", "--resume", cwd=workdir)
    said = [line for line in done.stderr.splitlines() if line.startswith("train: ")]
    assert said == [
        f"train: checkpoint damaged/checkpoints/step-00000003 is incomplete (__1_0.distcp has {size // 2:,} bytes, "
        f"complete.json records {size:,}): resuming from step-00000001 instead; a save at its step replaces it",
        "train: checkpoint damaged/checkpoints/step-00000002 is incomplete (__0_0.distcp is missing): resuming from "
        "step-00000001 instead; a save at its step replaces it",
    ], done.stderr[-3000:]  # fmt: skip
    assert "Traceback" not in done.stderr and "resumed from step-00000001" in done.stdout, done.stdout[-3000:]
    assert [checkpoint.incomplete(folder / f"step-{step:08d}") for step in range(1, 5)] == [None] * 4
    logged = [json.loads(line)["step"] for line in (workdir / "damaged" / "metrics.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 3, 4]
    replayed = losses(workdir / "damaged")
    assert [replayed[step] for step in (1, 2, 3)] == [first[step] for step in (1, 2, 3)]

    shutil.rmtree(folder)
    run(*common, "--steps", "1", cwd=workdir)
    assert [json.loads(line)["step"] for line in (workdir / "damaged" / "metrics.jsonl").read_text().splitlines()] == [1]


def test_loss_falls_on_a_repeated_batch(workdir):
    shard = pq.read_table(workdir / "curated" / "tokens" / "part-00000.parquet").slice(0, 1)
    tokens = shard["tokens"][0].as_py()[:64]
    assert len(tokens) == 64
    (workdir / "one").mkdir(exist_ok=True)
    one = pa.table({"id": shard["id"], "source": ["web"], "tokens": [tokens], "n_tokens": [64]}, schema=TOKEN_SCHEMA)
    pq.write_table(one, workdir / "one" / "part-00000.parquet")
    (workdir / "repeat.yaml").write_text(
        "name: repeat\ntokenizer: curated/tokens/tokenizer.json\nsources:\n  web: {paths: ['one/*.parquet'], weight: 1, max_epochs: 1000}\n"
    )
    run("training", "--mixture", "repeat.yaml", "--config", "settings.yaml", "--steps", "20", "--lr", "0.001",
        "--out", "repeat", cwd=workdir)  # fmt: skip
    curve = [loss for _, loss in sorted(losses(workdir / "repeat").items())]
    assert len(curve) == 20
    assert curve[-1] < 0.5 * curve[0] and max(curve[-5:]) < min(curve[:5]), curve


def test_kill_mid_phase_and_resume_is_bit_identical(workdir, phased_run):
    """(Resuming on another layout or rank count: tests/test_parallelism.py.)"""
    common = PHASED
    whole = losses(phased_run)
    record = metrics.load(str(workdir / "whole")).iloc[-1]
    assert {"loss_per_source.web", "loss_per_source.more", "tokens_per_source.web", "mfu"} <= set(record.index)
    assert abs(record["token_share.web"] - 0.6) < 0.02  # half the run at 0.9, half at 0.3
    frame = metrics.load(str(workdir / "whole")).drop_duplicates("step", keep="last")
    assert list(frame.phase) == ["warm"] * 6 + ["anneal"] * 6

    resumed_from = kill_at_checkpoint(workdir, common, "killed", 4)
    resume(common, "killed", workdir, resumed_from)
    killed = losses(workdir / "killed")
    after = [step for step in whole if step > resumed_from]
    assert after and [killed[s] for s in after] == [whole[s] for s in after]  # across the phase switch after step 6
    rates = {name: metrics.load(str(workdir / name)).drop_duplicates("step", keep="last").set_index("step").lr for name in ("whole", "killed")}
    assert [rates["killed"][s] for s in after] == [rates["whole"][s] for s in after]  # the same LR horizon
    validated = {name: metrics.load(str(workdir / name)).dropna(subset=["val_loss"]).set_index("step") for name in ("whole", "killed")}
    assert list(validated["whole"].index) == [4, 8, 12]  # the held-out slice, scored in total and per source
    assert validated["whole"][["val_loss_per_source.web", "val_loss_per_source.more"]].notna().all().all()
    for column in ("val_loss", "val_loss_per_source.web", "val_loss_per_source.more"):  # the same slice after a resume
        assert list(validated["killed"].loc[[s for s in (8, 12) if s > resumed_from], column]) == list(
            validated["whole"].loc[[s for s in (8, 12) if s > resumed_from], column])


def test_context_extension_phase_128_to_512_resumes_bit_identically_and_exports_with_yarn(workdir, tmp_path):
    """A curriculum that trains at 128 tokens, then at 512 with a new RoPE base and YaRN scaling and as many tokens
    per step: killed before the switch or after it, the resumed losses are bit-identical; the export carries the
    YaRN RoPE and transformers computes our logits on 512 tokens."""
    transformers = pytest.importorskip("transformers", reason="transformers is in the test extra")
    import torch

    from training.export import find_checkpoint, load_model

    (workdir / "extend.yaml").write_text(
        "name: extend\nsources:\n  web: {paths: ['curated/tokens/part-*.parquet'], max_epochs: 100}\nphases:\n"
        "  - {name: short, fraction: 0.5, weights: {web: 1}}\n"
        "  - {name: long, weights: {web: 1}, seq_len: 512, global_batch: 2, micro_batch: 1, rope_theta: 40000,\n"
        "     rope_scaling: {kind: yarn, factor: 4}}\n"
    )
    (workdir / "short.yaml").write_text(SETTINGS.replace("seq_len: 64", "seq_len: 128"))
    common = ["training", "--mixture", "extend.yaml", "--config", "short.yaml", "--steps", "8", "--checkpoint-every", "3",
              "--eval-every", "2"]  # fmt: skip
    run(*common, "--out", "extend", cwd=workdir)
    whole = metrics.load(str(workdir / "extend")).set_index("step")
    assert list(whole.seq_len) == [128] * 4 + [512] * 4 and set(whole.tokens_per_step) == {1024}
    assert list(whole.phase) == ["short"] * 4 + ["long"] * 4 and whole.loc[[2, 4, 6, 8], "val_loss"].notna().all()
    killed_at = kill_at_checkpoint(workdir, common, "extend-killed", 3)  # resumes before the switch and runs across it
    assert killed_at == 3, "the run passed the phase switch before the kill"
    resume(common, "extend-killed", workdir, 3)
    (workdir / "extend-late" / "checkpoints").mkdir(parents=True)  # resumes after the switch
    shutil.copytree(workdir / "extend" / "checkpoints" / "step-00000006", workdir / "extend-late" / "checkpoints" / "step-00000006")
    resume(common, "extend-late", workdir, 6)
    for name, first in (("extend-killed", 4), ("extend-late", 7)):
        resumed = metrics.load(str(workdir / name)).set_index("step")
        assert list(resumed.loc[first:8].loss) == list(whole.loc[first:8].loss), name
        assert list(resumed.loc[first:8].val_loss.dropna()) == list(whole.loc[first:8].val_loss.dropna()), name

    run("training", "export", "--checkpoint", "extend", "--out", str(tmp_path / "hf"), cwd=workdir)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["rope_theta"] == 40000 and config["max_position_embeddings"] == 512
    assert config["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                                      "beta_fast": 32.0, "beta_slow": 1.0}  # fmt: skip
    ours = load_model(*find_checkpoint(workdir / "extend"))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"), dtype=torch.float32).eval()
    ids = torch.from_numpy(pq.read_table(workdir / "curated" / "tokens" / "part-00000.parquet")["tokens"].combine_chunks().values
                           .to_numpy()[:512].astype("int64"))[None]  # fmt: skip
    with torch.no_grad():
        difference = (ours(ids) - theirs(ids).logits).abs().max().item()
    print(f"\nexported YaRN model: max |logit difference| on 512 tokens = {difference:.2e}")
    assert difference < 1e-4


def test_lineage_and_missing_sources_are_reported(workdir):
    run("training", "--mixture", "two.yaml", "--config", "settings.yaml", "--steps", "2", "--lineage-every", "1",
        "--out", "lineage", cwd=workdir)  # fmt: skip
    lines = [json.loads(line) for line in (workdir / "lineage" / "lineage.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in lines] == [1, 2]
    assert len(lines[0]["sequences"]) == 8 and all(seq["doc_ids"] for seq in lines[0]["sequences"])
    run("training", "--mixture", "two.yaml", "--config", "settings.yaml", "--steps", "4", "--lr", "1e30", "--out", "nan",
        cwd=workdir)  # fmt: skip
    events = [json.loads(line) for line in (workdir / "nan" / "events.jsonl").read_text().splitlines()]
    assert events and events[0]["event"] == "nan" and all(seq["doc_ids"] for seq in events[0]["sequences"])
    repo = Path(__file__).resolve().parents[1]
    failed = subprocess.run([sys.executable, "-m", "training", "--mixture", str(repo / "mixtures" / "web70_code20.yaml")],
                            capture_output=True, text=True, cwd=workdir)  # fmt: skip
    assert failed.returncode == 2 and "source 'web' has no token shards" in failed.stderr


def test_two_nodes_by_c10d_rendezvous_killed_twice_resume_on_two_nodes_then_on_one(workdir):
    """2 nodes x 1 process (two torchrun agents meeting at a c10d rendezvous, as on two machines), killed at its
    first checkpoint and again at its second; resumed on 2 nodes, losses and LR are bit-identical to an
    uninterrupted 2-node run; resumed on 1 node they agree within 1e-4 (reductions group differently)."""
    common = ["--mixture", "two.yaml", "--config", "settings.yaml", "--steps", "12", "--checkpoint-every", "4"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def two_nodes(out: str, *extra: str) -> list[subprocess.Popen]:
        agent = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend",
                 "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", out, "-m", "training", *common, "--out", out, *extra]  # fmt: skip
        return [subprocess.Popen(agent, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True) for _ in range(2)]  # fmt: skip

    def finish(nodes: list[subprocess.Popen]) -> None:
        for node in nodes:
            assert node.wait(timeout=900) == 0, node.stderr.read()[-3000:]

    def kill_at(nodes: list[subprocess.Popen], checkpoint: Path) -> None:
        deadline = time.time() + 600
        while not (checkpoint / "train_state.json").exists() and time.time() < deadline and all(n.poll() is None for n in nodes):
            time.sleep(0.05)
        running = all(node.poll() is None for node in nodes)
        for node in nodes:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()
        assert running, "a node ended before the kill"
        assert (checkpoint / "train_state.json").exists(), "the nodes stopped before the checkpoint"

    finish(two_nodes("nodes-whole"))
    whole = losses(workdir / "nodes-whole")
    assert sorted(whole) == list(range(1, 13))
    saved = json.loads((workdir / "nodes-whole" / "checkpoints" / "step-00000012" / "train_state.json").read_text())
    assert len(saved["rng"]) == 2  # each rank's own generator state, not rank 0's for all
    checkpoints = workdir / "nodes-killed" / "checkpoints"
    kill_at(two_nodes("nodes-killed"), checkpoints / "step-00000004")
    kill_at(two_nodes("nodes-killed", "--resume"), checkpoints / "step-00000008")
    assert not (checkpoints / "step-00000012").exists(), "the run finished before the second kill"
    resumed_from = max(int(p.name[5:]) for p in checkpoints.glob("step-????????"))
    killed = losses(workdir / "nodes-killed")
    assert [killed[s] for s in range(5, resumed_from + 1)] == [whole[s] for s in range(5, resumed_from + 1)]
    run("training", *common, "--out", "nodes-killed", "--resume", "--ranks", "1", cwd=workdir)  # one node now
    killed = losses(workdir / "nodes-killed")
    differences = [abs(killed[s] - whole[s]) / whole[s] for s in range(resumed_from + 1, 13)]
    print(f"\n2 nodes killed twice; resumed on 2 nodes bit-identical through step {resumed_from}; "
          f"then on 1 node: max relative loss difference {max(differences):.2e}")  # fmt: skip
    assert max(differences) < 1e-4
    rates = {name: metrics.load(str(workdir / name)).drop_duplicates("step", keep="last").set_index("step").lr
             for name in ("nodes-whole", "nodes-killed")}  # fmt: skip
    assert [rates["nodes-killed"][s] for s in range(5, 13)] == [rates["nodes-whole"][s] for s in range(5, 13)]


def test_export_loads_in_transformers_with_our_logits_and_generates(workdir, phased_run, tmp_path):
    """`train export` of a 2-rank checkpoint: transformers loads it (model and tokenizer), its logits on curated text
    match ours within 1e-4 in fp32, and generate() runs."""
    transformers = pytest.importorskip("transformers", reason="transformers is in the test extra")
    import torch

    from training.export import find_checkpoint, load_model

    run("training", "export", "--checkpoint", phased_run.name, "--out", str(tmp_path / "hf"), cwd=workdir)
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} <= {
        p.name for p in (tmp_path / "hf").iterdir()
    }
    ours = load_model(*find_checkpoint(phased_run))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"), dtype=torch.float32).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    text = pq.read_table(sorted((workdir / "curated").glob("10_pii/part-*.parquet"))[0])["text"][0].as_py()
    ids = tokenizer(text, return_tensors="pt").input_ids[:, :64]
    assert ids.shape[1] == 64 and tokenizer.eos_token == "<|endoftext|>"
    with torch.no_grad():
        difference = (ours(ids) - theirs(ids).logits).abs().max().item()
    print(f"\nexported model: max |logit difference| on 64 tokens of curated text = {difference:.2e}")
    assert difference < 1e-4
    generated = theirs.generate(ids[:, :8], max_new_tokens=5, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    assert generated.shape == (1, 13)

    from filters.perplexity import PerplexityScorer  # curation scores text under the export: bits per byte of our loss

    short = tokenizer.decode(ids[0, :40])
    scored = PerplexityScorer(PerplexityScorer.Params(model_path=str(tmp_path / "hf"))).process(pa.table({"id": ["a"], "text": [short]}))
    with torch.no_grad():
        tokens = torch.tensor([[tokenizer.eos_token_id, *tokenizer(short, add_special_tokens=False)["input_ids"]]])
        nats = torch.nn.functional.cross_entropy(ours(tokens)[0, :-1], tokens[0, 1:], reduction="sum").item()
    assert scored.kept["perplexity_bpb"][0].as_py() == pytest.approx(nats / math.log(2) / len(short.encode()), rel=1e-4)

    from safetensors.torch import load_file

    from training.export import export

    export(phased_run, tmp_path / "sharded", shard_bytes=2 * 2**20)  # as past 5 GB, at 2 MiB
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    files = sorted({*index["weight_map"].values()})
    whole = load_file(tmp_path / "hf" / "model.safetensors")
    parts = {name: tensor for file in files for name, tensor in load_file(tmp_path / "sharded" / file).items()}
    assert len(files) > 1 and not (tmp_path / "sharded" / "model.safetensors").exists()
    assert all((tmp_path / "sharded" / file).stat().st_size < 2 * 2**20 + 2**16 for file in files)  # a tensor over the limit gets a file alone
    assert parts.keys() == whole.keys() == index["weight_map"].keys() and all(torch.equal(parts[k], whole[k]) for k in whole)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in whole.values())
    sharded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "sharded"), dtype=torch.float32).eval()
    with torch.no_grad():
        assert torch.equal(sharded(ids).logits, theirs(ids).logits)


def test_bf16_with_activation_checkpointing_and_compile_resumes_bit_identically(workdir):
    """The GPU configuration on 2 CPU ranks: bf16 parameters (MixedPrecisionPolicy, fp32 reduce), activation
    checkpointing and torch.compile together; killed after its first checkpoint and resumed, the losses and LR of
    the remaining steps are bit-identical to an uninterrupted run. The model is 2 blocks of width 64: bf16 matmuls
    are slow on CPUs (4.5 s a step at the tiny preset's size), and no size changes what is checked."""
    (workdir / "bf16.yaml").write_text(SETTINGS.replace("dtype: fp32", "dtype: bf16") + "activation_checkpointing: true\ncompile: true\n"
                                       "model_overrides: {dim: 64, n_layers: 2, n_heads: 2, n_kv_heads: 1, ffn_hidden: 172}\n")
    common = ["training", "--mixture", "two.yaml", "--config", "bf16.yaml", "--steps", "6", "--checkpoint-every", "3"]
    run(*common, "--out", "bf16-whole", cwd=workdir)
    whole = metrics.load(str(workdir / "bf16-whole")).set_index("step")
    assert list(whole.index) == list(range(1, 7)) and whole.loss.notna().all()
    resume(common, "bf16-killed", workdir, kill_at_checkpoint(workdir, common, "bf16-killed", 3))
    killed = metrics.load(str(workdir / "bf16-killed")).set_index("step")
    assert list(killed.loc[4:6].loss) == list(whole.loc[4:6].loss) and list(killed.loc[4:6].lr) == list(whole.loc[4:6].lr)


def adam_updates(checkpoint: Path) -> int:
    """Optimizer steps taken, from AdamW's own counter in a DCP checkpoint."""
    state = checkpoint_tensors(checkpoint)
    (steps,) = {int(param_state["step"]) for param_state in state["optim"]["state"].values()}  # one count for all
    return steps


def test_spike_policies_skip_the_update_or_rewind_past_a_planted_bad_document(workdir, monkeypatch):
    """A document of rare random tokens, planted where it lands a few steps after the spike detector's warm-up:
    `skip` drops those steps' updates, `rewind` reloads the last checkpoint and never trains on it again; both name
    it in events.jsonl."""
    import numpy as np

    from training.data import MixtureLoader
    from training.mixture import load_mixture

    garbage = np.random.default_rng(0).integers(1024, 2048, 1100).tolist()  # the upper half of a 2,048 vocabulary
    (workdir / "planted").mkdir(exist_ok=True)
    table = pa.table({"id": ["planted-garbage"], "source": ["web"], "tokens": [garbage], "n_tokens": [len(garbage)]}, schema=TOKEN_SCHEMA)
    pq.write_table(table, workdir / "planted" / "part-00000.parquet")
    (workdir / "spike.yaml").write_text("name: spike\ntokenizer: curated/tokens/tokenizer.json\nsources:\n  web: {paths: "
                                        "['curated/tokens/part-*.parquet', 'planted/*.parquet'], max_epochs: 100}\n")  # fmt: skip
    (workdir / "spiky.yaml").write_text(SETTINGS + "spike_sigma: 3\n")
    monkeypatch.chdir(workdir)  # the mixture's paths are relative to it
    mixture = load_mixture("spike.yaml")

    def planted_steps(seed: int) -> list[int]:
        data, steps = MixtureLoader(mixture, 64, 8, 2, 0, 1, seed, 0, total_steps=20), []
        for step in range(1, 21):
            data.plan_step()
            steps += [step] if any("planted-garbage" in s["doc_ids"] for s in data.last_step_documents()) else []
        return steps

    seed, steps = next((seed, steps) for seed in range(100) for steps in [planted_steps(seed)] if steps and 13 <= steps[0] <= 16)
    common = ["training", "--mixture", "spike.yaml", "--config", "spiky.yaml", "--steps", "20", "--seed", str(seed),
              "--checkpoint-every", "5"]  # fmt: skip
    run(*common, "--spike-policy", "skip", "--out", "skip", cwd=workdir)
    events = [json.loads(line) for line in (workdir / "skip" / "events.jsonl").read_text().splitlines()]
    print(f"\nplanted document in steps {steps} (seed {seed}); skip: " + "; ".join(
        f"step {e['step']} loss {e['loss']:.2f} over {e['threshold']:.2f}: {e['action']}" for e in events))  # fmt: skip
    assert events and {e["step"] for e in events} <= set(steps)  # a step holding only its first tokens may pass
    first = events[0]["step"]
    assert all(e["action"] == "skipped the update" and "planted-garbage" in e["documents"]["web"] for e in events)
    assert adam_updates(workdir / "skip" / "checkpoints" / "step-00000020") == 20 - len(events)

    run(*common, "--spike-policy", "rewind", "--lineage-every", "1", "--out", "rewind", cwd=workdir)
    events = [json.loads(line) for line in (workdir / "rewind" / "events.jsonl").read_text().splitlines()]
    checkpoint = f"step-{(first - 1) // 5 * 5:08d}"
    print("rewind: " + "; ".join(f"step {e['step']} loss {e['loss']:.2f}: {e['action']}, skipping {e['documents']}" for e in events))
    assert len(events) == 1 and events[0]["step"] == first and events[0]["action"] == f"rewound to {checkpoint}"
    assert "planted-garbage" in events[0]["documents"]["web"]
    lineage = [json.loads(line) for line in (workdir / "rewind" / "lineage.jsonl").read_text().splitlines()]
    replayed = [entry for entry in lineage[lineage.index(next(e for e in lineage if e["step"] == first - 1)) + 1 :]]
    assert all("planted-garbage" not in s["doc_ids"] for entry in replayed for s in entry["sequences"])
    state = json.loads((workdir / "rewind" / "checkpoints" / "step-00000020" / "train_state.json").read_text())
    assert "planted-garbage" in state["data"]["skipped"]["web"]
    assert adam_updates(workdir / "rewind" / "checkpoints" / "step-00000020") == 20
    final = losses(workdir / "rewind")
    assert max(final[s] for s in steps) < events[0]["threshold"]


def test_a_spike_that_recurs_at_the_same_step_after_a_rewind_is_skipped(workdir):
    """As docs/training.md says: with `rewind`, a spike that comes back at the same step after the rewind (here a NaN from
    an lr of 1e30, whatever the documents) is skipped instead of rewinding again, and the run goes on."""
    run("training", "--mixture", "two.yaml", "--config", "settings.yaml", "--steps", "4", "--lr", "1e30", "--checkpoint-every",
        "1", "--spike-policy", "rewind", "--out", "rewind-twice", cwd=workdir)  # fmt: skip
    events = [json.loads(line) for line in (workdir / "rewind-twice" / "events.jsonl").read_text().splitlines()]
    print("\n" + "; ".join(f"step {e['step']} {e['event']}: {e['action']}" for e in events))
    assert [(e["step"], e["action"]) for e in events] == [(3, "rewound to step-00000002"), (3, "skipped the update"),
                                                          (4, "rewound to step-00000003"), (4, "skipped the update")]  # fmt: skip
    assert adam_updates(workdir / "rewind-twice" / "checkpoints" / "step-00000004") == 2  # steps 1 and 2, before the loss turned NaN


def test_z_loss_weight_changes_the_updates_not_the_logged_loss(workdir):
    """The same 3 steps with z-loss weight 0 and 1e-2: step 1's loss (before any update) is the same plain
    cross-entropy, the weighted run logs mean log(Z)^2 (about log(vocabulary)^2 = 58 near a uniform start) and its
    later losses differ, its updates having followed the extra gradient."""
    for name, weight in (("z0", "0"), ("z", "1e-2")):
        run("training", "--mixture", "two.yaml", "--config", "settings.yaml", "--steps", "3", "--z-loss", weight, "--out", name,
            cwd=workdir)  # fmt: skip
    plain, weighted = metrics.load(str(workdir / "z0")).set_index("step"), metrics.load(str(workdir / "z")).set_index("step")
    print(f"\nz-loss 0: losses {list(plain.loss)}; 1e-2: losses {list(weighted.loss)}, z-loss {list(weighted.z_loss)}")
    assert "z_loss" not in plain and weighted.z_loss.notna().all()
    assert weighted.loss[1] == plain.loss[1] and (weighted.loss[2:] != plain.loss[2:]).all()
    assert 0.8 * math.log(2048) ** 2 < weighted.z_loss[1] < 1.2 * math.log(2048) ** 2


def checkpoint_tensors(checkpoint: Path) -> dict:
    """A DCP checkpoint's tensors, gathered whole: model, optimizer and what was saved beside them."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    whole = checkpoint.parent / f"{checkpoint.name}.pt"
    dcp_to_torch_save(str(checkpoint), str(whole))
    state = torch.load(whole, weights_only=False)
    whole.unlink()
    return state


def test_weight_average_of_the_last_steps_is_what_the_run_ends_with_and_survives_a_kill(workdir):
    """--average-last 0.5 of 6 steps averages the weights after steps 4, 5 and 6: step 5's checkpoint holds its
    weights and the running mean of steps 4-5 (their mean), the run ends with the mean (its last checkpoint's model
    is the mean saved beside it, not the last step's weights), and a run killed inside the window and resumed ends
    with the same weights, bit for bit."""
    import torch

    common = ["training", "--mixture", "two.yaml", "--config", "settings.yaml", "--steps", "6", "--checkpoint-every", "1",
              "--average-last", "0.5"]  # fmt: skip
    run(*common, "--out", "averaged", cwd=workdir)
    steps = {step: checkpoint_tensors(workdir / "averaged" / "checkpoints" / f"step-{step:08d}") for step in (3, 4, 5, 6)}
    assert "extra" not in steps[3] and steps[4]["extra"] and set(steps[4]["extra"]) <= set(steps[4]["model"])
    for name, mean in steps[5]["extra"].items():
        torch.testing.assert_close(mean, (steps[4]["model"][name] + steps[5]["model"][name]) / 2)
        assert torch.equal(steps[6]["model"][name], steps[6]["extra"][name])
        assert not torch.equal(steps[6]["model"][name], steps[5]["model"][name])
    resume(common, "averaged-killed", workdir, kill_at_checkpoint(workdir, common, "averaged-killed", 4))
    resumed = checkpoint_tensors(workdir / "averaged-killed" / "checkpoints" / "step-00000006")
    assert all(torch.equal(resumed["model"][name], weights) for name, weights in steps[6]["model"].items())


def train_command(*args: str, mixture: str = "two.yaml") -> list[str]:
    return [sys.executable, "-m", "training", "--mixture", mixture, "--config", "settings.yaml", *args]


def start_in_own_session(workdir: Path, *args: str) -> subprocess.Popen:
    """`train` as a shell starts it: a process group of its own, which a kill -9 -- -PGID ends."""
    return subprocess.Popen(train_command(*args, mixture="endless.yaml"), cwd=workdir, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip


@pytest.fixture
def cleanup():
    """Run folders whose `train` processes are killed, launcher group and any rank left, when a test ends early."""
    outs: list[Path] = []
    yield outs
    for out in outs:
        for process in writers(out):
            with contextlib.suppress(Exception):
                process.kill()


def wait_for(condition, process: subprocess.Popen, what: str) -> None:
    deadline = time.time() + 300
    while not condition():
        assert process.poll() is None, f"train ended before {what}: {process.stderr.read()[-3000:]}"
        assert time.time() < deadline, f"no {what} in 300 s"
        time.sleep(0.05)


def writers(out: Path) -> list:
    """Running processes whose command line trains into `out` (a launcher or its ranks)."""
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if f"--out {out.name}" in " ".join(process.info["cmdline"] or []) and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def test_killing_train_kills_its_ranks_and_one_writer_holds_a_run_folder(workdir, cleanup):
    """kill -9 of `train`'s process group mid-run stops every rank within seconds (torchrun starts them in sessions of
    their own); while a run trains, a second `train` into its folder is refused in one line; the killed run's lock is
    stale and a --resume takes it over; Ctrl-C stops a run with one line, and --max-restarts does not restart it."""
    import psutil

    (workdir / "endless.yaml").write_text("name: endless\nsources:\n  web: {paths: ['curated/tokens/part-*.parquet'], max_epochs: 1000}\n")
    out = workdir / "killed-launcher"
    cleanup.append(out)
    first = start_in_own_session(workdir, "--steps", "1000", "--checkpoint-every", "1", "--out", out.name)
    wait_for(lambda: checkpoint_steps(out), first, "a checkpoint")
    later = str(max(checkpoint_steps(out)) + 3)  # a --resume typed while the run still trains
    second = subprocess.run(train_command("--steps", later, "--out", out.name, "--resume", mixture="endless.yaml"), cwd=workdir,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert second.returncode == 2 and f"train: {out.name} is in use by train (pid {first.pid} " in second.stderr, second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
    ranks = psutil.Process(first.pid).children(recursive=True)
    assert len(ranks) == 2 and {p.pid for p in writers(out)} == {first.pid} | {p.pid for p in ranks}
    os.killpg(first.pid, signal.SIGKILL)
    killed_at = time.time()
    first.wait()
    _, alive = psutil.wait_procs(ranks, timeout=10)
    print(f"\nranks left {time.time() - killed_at:.1f} s after the kill: {alive}")
    assert not alive and not writers(out)
    reached = max(checkpoint_steps(out))
    assert reached < 1000, "the run finished before the kill"
    files = sorted((str(p), p.stat().st_size) for p in out.rglob("*"))  # a save the kill cut leaves its .tmp, never loaded
    time.sleep(2)
    assert sorted((str(p), p.stat().st_size) for p in out.rglob("*")) == files, "a rank still writes"

    assert json.loads((out / "train.lock").read_text())["pid"] == first.pid  # left by the killed launcher: stale
    resumed = subprocess.run(train_command("--steps", str(reached + 1), "--out", out.name, "--resume", mixture="endless.yaml"),
                             cwd=workdir, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert resumed.returncode == 0 and f"resumed from step-{reached:08d}" in resumed.stdout, resumed.stderr[-3000:]
    assert max(checkpoint_steps(out)) == reached + 1 and not (out / "train.lock").exists()

    logged = (out / "metrics.jsonl").read_text().count("\n")
    interrupted = start_in_own_session(workdir, "--steps", "1000", "--out", out.name, "--resume", "--max-restarts", "2")
    wait_for(lambda: (out / "metrics.jsonl").read_text().count("\n") > logged, interrupted, "a step")
    ranks = psutil.Process(interrupted.pid).children(recursive=True)
    os.killpg(interrupted.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground process group
    _, error = interrupted.communicate(timeout=60)
    assert interrupted.returncode == 130 and error.strip() == "train: stopped by SIGINT; every rank has ended: continue with --resume"
    assert len(ranks) == 2 and not psutil.wait_procs(ranks, timeout=10)[1] and not writers(out)
    assert not (out / "train.lock").exists()


def test_one_rank_trains_in_trains_own_process_and_stops_on_sigterm_with_one_line(workdir, cleanup):
    """Without --max-restarts, one rank needs no torchrun agent and no second interpreter: it trains in `train`'s
    process; SIGTERM (a scheduler's stop) ends it as it ends launched ranks, lock released, and --resume goes on."""
    import psutil

    (workdir / "endless.yaml").write_text("name: endless\nsources:\n  web: {paths: ['curated/tokens/part-*.parquet'], max_epochs: 1000}\n")
    out = workdir / "one-rank"
    cleanup.append(out)
    running = start_in_own_session(workdir, "--steps", "1000", "--checkpoint-every", "2", "--ranks", "1", "--out", out.name)
    wait_for(lambda: checkpoint_steps(out), running, "a checkpoint")
    assert psutil.Process(running.pid).children(recursive=True) == [] and [p.pid for p in writers(out)] == [running.pid]
    running.terminate()
    _, error = running.communicate(timeout=60)
    assert running.returncode == 128 + signal.SIGTERM, error
    assert error.strip() == "train: stopped by SIGTERM; every rank has ended: continue with --resume"
    assert not (out / "train.lock").exists()
    reached = max(checkpoint_steps(out))
    resumed = subprocess.run(train_command("--steps", str(reached + 1), "--ranks", "1", "--out", out.name, "--resume",
                                           mixture="endless.yaml"), cwd=workdir, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0 and f"resumed from step-{reached:08d}" in resumed.stdout, resumed.stderr[-3000:]


def checkpoint_steps(out: Path) -> list[int]:
    return [int(p.name[5:]) for p in (out / "checkpoints").glob("step-????????")] if (out / "checkpoints").is_dir() else []


def test_resume_says_where_it_starts_and_a_finished_run_says_so(workdir):
    """--resume on a folder without a checkpoint says it starts from step 0 (the README's first command does this);
    past its --steps it says it is done (exit 0, nothing trained); another --seed is refused before launch."""
    first = run("training", "--mixture", "two.yaml", "--config", "settings.yaml", "--steps", "2", "--checkpoint-every", "2",
                "--out", "fresh", "--resume", cwd=workdir)  # fmt: skip
    assert "train: no checkpoint in fresh: starting from step 0" in first.stdout and sorted(losses(workdir / "fresh")) == [1, 2]
    done = run("training", "--mixture", "two.yaml", "--config", "settings.yaml", "--steps", "1", "--out", "fresh", "--resume",
               cwd=workdir)  # fmt: skip
    assert done.stdout.strip() == "train: fresh is already at step 2 (--steps 1): nothing to train; raise --steps to continue"
    assert sorted(losses(workdir / "fresh")) == [1, 2] and not done.stderr.strip()
    seed = subprocess.run(train_command("--steps", "4", "--out", "fresh", "--resume", "--seed", "7"), cwd=workdir,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert seed.returncode == 2 and seed.stderr.strip() == (
        "train: fresh/checkpoints/step-00000002: the run was trained with --seed 0, not 7: resume with --seed 0, or start a "
        "new --out"), seed.stderr


def test_a_rank_killed_between_checkpoints_restarts_every_rank_from_the_last_one_with_the_same_losses(workdir, phased_run, cleanup):
    """`train --max-restarts 3`: rank 1 SIGKILLed after step 6 (checkpoints at 4 and 8) makes `train` start every
    rank again from the last complete checkpoint, with one line saying so; the job exits 0 and every step's loss is
    the uninterrupted run's (the replayed steps' records come again in metrics.jsonl and the last counts)."""
    import psutil

    out = workdir / "restarted"
    cleanup.append(out)
    process = subprocess.Popen([sys.executable, "-m", *PHASED, "--out", out.name, "--max-restarts", "3"], cwd=workdir,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    wait_for(lambda: (out / "metrics.jsonl").is_file() and '"step": 6,' in (out / "metrics.jsonl").read_text(), process, "step 6")
    (rank_1,) = [rank for rank in psutil.Process(process.pid).children() if rank.environ().get("RANK") == "1"]
    rank_1.send_signal(signal.SIGKILL)
    printed, error = process.communicate(timeout=900)
    assert process.returncode == 0, error[-3000:]
    restarts = [line for line in (printed + error).splitlines() if line.startswith("train: ") and "restart" in line]
    print("\n" + "\n".join(restarts))
    assert len(restarts) == 1 and "Traceback" not in error, printed + error  # once, not per rank; no rank's traceback
    step, checkpoint = re.fullmatch(r"train: rank 1 was killed by SIGKILL at step ~(\d+); restart 1 of 3 from (step-\d{8})",
                                    restarts[0]).groups()  # fmt: skip
    assert int(step) >= 7 and checkpoint in ("step-00000004", "step-00000008") and f"resumed from {checkpoint}" in printed
    logged = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert logged == list(range(1, 13))  # the restart cut the records past its checkpoint: each step once
    assert losses(out) == losses(phased_run) and sorted(losses(out)) == list(range(1, 13))
    assert not writers(out) and not (out / "train.lock").exists()


def test_a_full_disk_at_a_checkpoint_is_one_line_and_leaves_no_tmp(workdir):
    """On a real 16 MiB filesystem (a tmpfs, mounted in a mount namespace of its own) the first checkpoint (40 MB)
    fills the disk: one line names it, with the path and the free space, exit 1, and no step-N.tmp is left; with
    --max-restarts the reported error is not retried."""
    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) is needed to mount a small tmpfs")
    train = " ".join(train_command("--steps", "4", "--checkpoint-every", "2", "--out", "small/run", "--max-restarts", "2"))
    script = f"mkdir -p small && mount -t tmpfs -o size=16M tmpfs small || exit 0; {train}; echo exit=$?; find small | sort"
    done = subprocess.run(["unshare", "--mount", "--map-root-user", "sh", "-c", script], cwd=workdir, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    if "exit=" not in done.stdout:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {done.stderr.strip()[-300:]}")
    print(f"\n{done.stderr.strip()}")
    assert "exit=1" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    line = "train: disk full writing checkpoint small/run/checkpoints/step-00000002.tmp (removed): "
    assert done.stderr.startswith(line) and "MiB free there" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "small/run/metrics.jsonl" in done.stdout and ".tmp" not in done.stdout.split("exit=")[1]
