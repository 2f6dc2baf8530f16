"""`curate ablate`: variant recipes, multiple-choice scoring, and a two-variant ablation end to end on real parts."""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from experiments.ablation import AblationSpec, VariantSpec, variant_recipe
from experiments.ablation_report import signed
from curation.recipe import RecipeError, load_recipe
from curation.sources import sample
from filters.benchmark_index import BenchmarkSpec, ChoiceItem, load_choice_items
from training.choices import choice_log_likelihoods, many_choice_log_likelihoods, score, wilson_interval

CURATE = [sys.executable, "-m", "experiments"]
ENDINGS = ["the report was published on time", "purple elephants sing loudly", "it rained in the city all day"]


def test_variants_leave_out_or_change_stages_and_errors_name_the_field():
    base = load_recipe("fineweb-snapshot")
    no_quality = variant_recipe(base, VariantSpec(name="no-quality", remove=["quality"]))
    assert "quality" not in [s.stage for s in no_quality.stages] and len(no_quality.stages) == len(base.stages) - 1
    stricter = variant_recipe(base, VariantSpec(name="strict", set={"quality.threshold": 0.8}))
    assert next(s for s in stricter.stages if s.stage == "quality").params["threshold"] == 0.8
    # the stages before the change keep their chained hashes: the runner reuses them
    shared = sum(a == b for a, b in zip(base.stage_hashes(["x"], "s"), stricter.stage_hashes(["x"], "s")))
    assert shared == 1 + [s.stage for s in base.stages].index("quality")
    with pytest.raises(RecipeError, match="has no stage 'nope'"):
        variant_recipe(base, VariantSpec(name="v", remove=["nope"]))
    with pytest.raises(RecipeError, match=r"stages\[\d+\].params.threshold"):
        variant_recipe(base, VariantSpec(name="v", set={"quality.threshold": 3}))
    with pytest.raises(ValueError, match="variant names must differ"):
        AblationSpec(variants=[VariantSpec(name="base")])


def test_ablation_files_and_flags_are_validated_with_errors_that_name_the_field(tmp_path, capsys):
    from experiments.ablation import load_ablation, load_variant
    from experiments.cli import curate_main as main

    variant = tmp_path / "strict.yaml"
    variant.write_text("set: {quality.threshold: 0.8}\n")
    assert load_variant(str(variant)) == {"name": "strict", "set": {"quality.threshold": 0.8}}
    whole = tmp_path / "mine.yaml"
    whole.write_text("name: mine\nstages: [{stage: extract}]\n")
    assert load_variant(str(whole)) == {"name": "mine", "recipe": str(whole)}
    spec = tmp_path / "ablation.yaml"
    spec.write_text("variants: [{name: a, remove: [quality]}]\ntokens: -5\n")
    with pytest.raises(RecipeError, match="tokens: Input should be greater than 0"):
        load_ablation(str(spec))
    assert load_ablation(str(spec), tokens=1000).tokens == 1000  # a flag overrides the file
    assert load_ablation(str(spec), tokens=1000).seeds == 3  # the default: every variant at 3 paired seeds
    with pytest.raises(RecipeError, match="seeds: Input should be greater than or equal to 2"):
        load_ablation(str(spec), tokens=1000, seeds=1)
    with pytest.raises(RecipeError, match="deciding_slice: Input should be 'all', 'kept' or 'removed'"):
        load_ablation(str(spec), tokens=1000, deciding_slice="clean")
    spec.write_text("variants: [{name: a, remove: [quality]}]\n")
    assert main(["ablate", str(spec), "--benchmark", "arc-only-a-name"]) == 2
    assert "give NAME=FORMAT:PATH" in capsys.readouterr().err


def test_a_width_trains_the_ladders_rule_and_an_older_ablation_folder_still_resumes(tmp_path):
    from experiments.ablation import Ablation, load_ablation
    from experiments.cli import add_ablate_arguments
    from experiments.ladder import PRESETS, LadderSpec, rung_settings
    from training.config import load_config

    spec_file = tmp_path / "ablation.yaml"
    spec_file.write_text("variants: [{name: raw, recipe: extract-only}]\nwidth: 20\n")
    ablation = Ablation(load_ablation(str(spec_file)), str(tmp_path / "out"), ["pages.warc.gz"], "")
    config = load_config(ablation.config_argument(400))
    rule = rung_settings(LadderSpec(**PRESETS["cpu"]), 20, 400, 1)
    assert config.model_dump(include=set(rule)) == rule  # every setting of `train ladder`'s width-20 rung
    assert (config.lr, config.warmup, config.micro_batch, config.model_overrides["init_std"]) == (8e-3 * 64 / 20, 20, 8, None)
    assert ablation.ranks() == 1 and ablation.model_name() == "width 20 by the cpu ladder's rule"
    with pytest.raises(RecipeError, match="width: Input should be greater than or equal to 8"):
        load_ablation(str(spec_file), width=4)
    with pytest.raises(RecipeError, match=r"give `model` \(small\) or `width` \(20, the cpu ladder's rule\), not both"):
        load_ablation(str(spec_file), model="small")
    assert ablation.train_config(400) == config and not (tmp_path / "out" / "configs" / "w20-1-steps.yaml").exists()
    preset = Ablation(load_ablation(None, variants=[{"name": "raw", "recipe": "extract-only"}]), str(tmp_path / "preset"),
                      ["pages.warc.gz"], "")  # fmt: skip
    assert preset.config_argument(400) == "tiny" and preset.ranks() is None
    parser = argparse.ArgumentParser()
    add_ablate_arguments(parser)
    assert parser.parse_args([str(spec_file), "--width", "32"]).width == 32

    # an ablation.json written before `width` existed is the same ablation as a spec without one
    preset.check_same_ablation()
    record = tmp_path / "preset" / "ablation.json"
    written = json.loads(record.read_text())
    record.write_text(json.dumps({key: value for key, value in written.items() if key != "width"}))
    preset.check_same_ablation()
    record.write_text(json.dumps(written | {"width": 48}))
    with pytest.raises(RecipeError, match="holds another ablation"):
        preset.check_same_ablation()


def test_multiple_choice_layouts_give_context_choices_and_answer(tmp_path):
    hellaswag = tmp_path / "hellaswag.jsonl"
    hellaswag.write_text(json.dumps({"ind": 7, "ctx": "The committee met and", "endings": ENDINGS, "label": "2"}) + "\n")
    arc = tmp_path / "arc.jsonl"
    arc.write_text(json.dumps({"id": "q1", "question": {"stem": "What falls from clouds?", "choices": [
        {"label": "A", "text": "rain"}, {"label": "B", "text": "rocks"}]}, "answerKey": "A"}) + "\n")  # fmt: skip
    mmlu = tmp_path / "mmlu.csv"
    mmlu.write_text("What is 2+2?,3,4,5,6,B\n")
    items = {name: load_choice_items(BenchmarkSpec(name=name, format=name, path=str(path)))
             for name, path in (("hellaswag", hellaswag), ("arc", arc), ("mmlu", mmlu))}  # fmt: skip
    assert items["hellaswag"] == [ChoiceItem("7", "The committee met and", ENDINGS, 2)]
    assert items["arc"] == [ChoiceItem("q1", "What falls from clouds?", ["rain", "rocks"], 0)]
    assert items["mmlu"][0].choices == ["3", "4", "5", "6"] and items["mmlu"][0].answer == 1
    with pytest.raises(ValueError, match="not multiple-choice"):
        load_choice_items(BenchmarkSpec(name="gsm8k", format="gsm8k"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"ind": 1, "ctx": "x", "endings": ["a", "b"], "label": 5}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl row 0: answer 5"):
        load_choice_items(BenchmarkSpec(name="bad", format="hellaswag", path=str(bad)))


CONTEXT = "The committee met and"


def tiny_model_and_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from training.model import ModelConfig, Transformer

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator([f"{CONTEXT} {e}" for e in ENDINGS] * 5,
                                  trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(ModelConfig(dim=32, n_layers=2, n_heads=2, n_kv_heads=1, ffn_hidden=64, vocab_size=300, max_seq_len=64))
    model.init_weights()
    return model, tokenizer


def test_choice_scores_are_the_log_likelihood_of_each_ending():
    """Padded, batched scoring equals each choice scored alone with a full forward pass."""
    model, tokenizer = tiny_model_and_tokenizer()
    model.eval()
    sums = choice_log_likelihoods(model, tokenizer, CONTEXT, ENDINGS)
    for ending, got in zip(ENDINGS, sums):
        context, continuation = tokenizer.encode(CONTEXT).ids, tokenizer.encode(" " + ending).ids
        ids = torch.tensor([context + continuation])
        with torch.no_grad():
            log_probs = torch.log_softmax(model(ids[:, :-1]), dim=-1)[0]
        expected = sum(float(log_probs[len(context) - 1 + k, token]) for k, token in enumerate(continuation))
        assert got == pytest.approx(expected, abs=1e-4)


def test_many_items_scored_in_shared_batches_equal_each_item_scored_alone():
    """Rows of several items, sorted by length across items and cut into batches of 3, give each item's own sums."""
    model, tokenizer = tiny_model_and_tokenizer()
    model.eval()
    items = [(CONTEXT, ENDINGS), ("A short one.", ENDINGS[:2]), (CONTEXT + " " + CONTEXT, list(reversed(ENDINGS)))]
    together = many_choice_log_likelihoods(model, tokenizer, items, batch=3)
    assert [len(sums) for sums in together] == [len(choices) for _, choices in items]
    for (context, choices), sums in zip(items, together):
        assert sums == pytest.approx(many_choice_log_likelihoods(model, tokenizer, [(context, choices)], batch=1)[0], abs=1e-4)
        assert sums == pytest.approx(choice_log_likelihoods(model, tokenizer, context, choices), abs=1e-4)


def test_accuracy_counts_known_answers_and_acc_norm_does_not_favour_short_endings():
    """A model trained on one ending picks it wherever it stands among the choices: items keyed to it are right, an
    item keyed to another ending is wrong. A model with uniform next-token odds pays the same per token, so `acc`
    takes the ending of fewest tokens and `acc_norm` the one of fewest tokens per byte: they part on a short ending."""
    model, tokenizer = tiny_model_and_tokenizer()
    ids = torch.tensor([tokenizer.encode(f"{CONTEXT} {ENDINGS[0]}").ids])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(60):
        loss = torch.nn.functional.cross_entropy(model(ids[:, :-1])[0], ids[0, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    orders = [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    items = [ChoiceItem(f"right-{k}", CONTEXT, [ENDINGS[i] for i in order], order.index(0)) for k, order in enumerate(orders)]
    items.append(ChoiceItem("keyed-to-another", CONTEXT, ENDINGS, 1))
    result = score(model, tokenizer, items)
    assert (result.items, result.acc, result.acc_norm) == (4, 0.75, 0.75)
    assert result.acc_interval == wilson_interval(3, 4) and result.acc_norm_interval == wilson_interval(3, 4)

    with torch.no_grad():
        model.norm.weight.zero_()  # every logit 0: each token costs log(300) whatever the text
    short, long = "ran", ENDINGS[0]
    tokens = {choice: len(tokenizer.encode(" " + choice).ids) for choice in (short, long)}
    assert tokens[short] < tokens[long] and tokens[short] / len(short) > tokens[long] / len(long)  # 2 < 17, 2/3 > 17/32
    uniform = score(model, tokenizer, [ChoiceItem("long-is-right", CONTEXT, [short, long], 1)])
    assert (uniform.acc, uniform.acc_norm) == (0.0, 1.0)


def test_document_losses_are_each_document_scored_alone_after_eos_and_long_ones_in_windows():
    """Batched, padded, length-sorted scoring equals a full forward pass over EOS + the document; a document longer
    than seq_len is the sum of its windows (each predicting seq_len tokens from a fresh context), every token once."""
    from training.doc_losses import loss_sums, windows

    model, tokenizer = tiny_model_and_tokenizer()
    model.eval()
    short = tokenizer.encode(CONTEXT).ids
    long = tokenizer.encode(" ".join(f"{CONTEXT} {e}" for e in ENDINGS * 4)).ids
    eos, seq_len = 0, 16
    assert len(short) < seq_len < len(long)

    def alone(stream: list[int]) -> float:
        ids = torch.tensor([stream])
        with torch.no_grad():
            return float(torch.nn.functional.cross_entropy(model(ids[:, :-1])[0], ids[0, 1:], reduction="sum"))

    got = loss_sums(model, [short, [], long], eos, seq_len, batch=2)
    assert got[0] == pytest.approx(alone([eos, *short]), rel=1e-5) and got[1] == 0.0
    pieces = windows(long, eos, seq_len)
    assert [len(p) - 1 for p in pieces[:-1]] == [seq_len] * (len(pieces) - 1) and sum(len(p) - 1 for p in pieces) == len(long)
    assert [token for p in pieces for token in p[1:]] == long and all(p[0] == q[-1] for q, p in zip(pieces, pieces[1:]))
    assert got[2] == pytest.approx(sum(alone(p) for p in pieces), rel=1e-5)
    assert loss_sums(model, [short, [], long], eos, seq_len, batch=1) == pytest.approx(got, rel=1e-5)


def test_wilson_interval():
    assert wilson_interval(0, 10)[0] == 0.0 and 0.2 < wilson_interval(0, 10)[1] < 0.35
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(1 - high) and 0.39 < low < 0.41


@pytest.mark.slow
def test_ablation_end_to_end_paired_intervals_and_resumed(tmp_path):
    """Two seeds (set here to keep CI short; the default is 3) of the base and a variant without the quality filter
    (a variant identical to the base is never called: tests/test_ablation_stats.py), each training the ladder rule's
    width-64 model (2 layers) for 4 steps on 2 ranks: what is checked is the ablation's steps and bookkeeping, which no
    model size changes."""
    pages = tmp_path / "pages"
    sample.generate(pages, pages=300, files=3, seed=5)
    benchmark = tmp_path / "hellaswag.jsonl"
    benchmark.write_text("".join(json.dumps({"ind": i, "ctx": f"Item {i}: the committee met and", "endings": ENDINGS,
                                             "label": i % 3}) + "\n" for i in range(12)))  # fmt: skip
    ablation = tmp_path / "ablation.yaml"
    ablation.write_text(f"""
base: fineweb-snapshot
variants:
  - {{name: no-quality, remove: [quality]}}
width: 64
ranks: 2
tokens: 8192
seeds: 2
eval_every: 4
eval_sequences: 16
validation_fraction: 0.1
data_scaling: [0.5, 1000]
benchmarks:
  - {{name: tiny-hellaswag, format: hellaswag, path: {benchmark}}}
""")
    out = tmp_path / "ablation"
    command = CURATE + ["ablate", str(ablation), "--input", f"{pages}/*.warc.gz", "--out", str(out), "--num-cpus", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((out / "results.json").read_text())
    assert set(results["runs"]) == {f"{v}-seed{s}" for v in ("base", "no-quality") for s in (0, 1)}
    assert results["seeds"] == [0, 1] and results["deciding_slice"] == "kept"
    shared = results["variants"]["no-quality"]["shared_with_base"]
    assert shared == ["00_read", "01_url_filter", "02_extract", "03_langid", "04_badwords", "05_heuristics"]
    assert "resumed: 18 stage-shard(s)" in done.stdout  # the variant reused the base's 6 stages of 3 shards
    # once tokenized, the parts before the pii stage are deleted everywhere: no planted address stays in any file
    assert "base: deleted the parts of 00_read, 01_url_filter" in " ".join(done.stdout.split())
    planted = [value for values in pq.read_table(pages / "truth.parquet")["pii_values"].to_pylist() for value in values if "@" in value]
    holding = [str(path.relative_to(out)) for path in out.rglob("*") if path.is_file() and any(
        address in path.read_bytes().decode("utf-8", "replace") + (str(pq.read_table(path).to_pylist()) if path.suffix == ".parquet" else "")
        for address in planted)]  # fmt: skip
    assert planted and holding == []
    assert results["variants"]["no-quality"]["documents"] > results["variants"]["base"]["documents"]
    for name, run in results["runs"].items():
        rows = [json.loads(line) for line in (out / "train" / name / "metrics.jsonl").read_text().splitlines()]
        validated = [(row["step"], row["val_loss"]) for row in rows if row.get("val_loss") is not None]
        assert [tuple(point) for point in run["curve"]] == validated and run["val_loss"] == validated[-1][1]
        assert run["benchmarks"]["tiny-hellaswag"]["items"] == 12

    # every run scored every validation document; the slices split them by the base's final stage
    held = pq.read_table(out / "validation" / "tokens" / "part-00000.parquet", columns=["id", "n_tokens"])
    losses = {name: pq.read_table(out / "doc_losses" / f"{name}.parquet") for name in results["runs"]}
    for table in losses.values():
        assert table["id"].to_pylist() == held["id"].to_pylist() and table["tokens"].to_pylist() == held["n_tokens"].to_pylist()
    kept_ids = {i for part in (out / "curated" / "base" / "10_pii").glob("part-*.parquet") for i in pq.read_table(part)["id"].to_pylist()}
    kept = sum(i in kept_ids for i in held["id"].to_pylist())
    assert (results["slices"]["kept"]["documents"], results["slices"]["removed"]["documents"]) == (kept, held.num_rows - kept)
    assert 0 < kept < held.num_rows and results["slices"]["all"]["tokens"] == sum(held["n_tokens"].to_pylist())
    base_sums = [losses[f"base-seed{s}"]["loss_sum"].to_numpy() for s in (0, 1)]
    assert results["loss"]["base"]["all"] == pytest.approx(sum(x.sum() for x in base_sums) / 2 / results["slices"]["all"]["tokens"])

    compared = results["comparison"]["no-quality"]
    for name, interval in compared["val_loss"].items():
        assert interval["low"] <= interval["difference"] <= interval["high"] and len(interval["per_seed"]) == 2
        assert interval["difference"] == pytest.approx(results["loss"]["no-quality"][name] - results["loss"]["base"][name])
    assert compared["resolved"] == compared["val_loss"]["kept"]["resolved"]
    accuracy = results["accuracy"]["base"]["tiny-hellaswag"]
    assert accuracy["chance"] == pytest.approx(1 / 3) and accuracy["items"] == 12
    assert accuracy["at_chance"] == (accuracy["acc"] * 12 < 8)  # on 12 items, 8 right is the least above a third at 5%
    assert not compared["benchmarks"]["tiny-hellaswag"]["called"]
    scaling = results["data_scaling"]  # each variant also at half the budget, one seed; 1000x is more than its data
    assert scaling["validated_on"] == "kept" and scaling["documents"] == kept and scaling["budget_tokens"] == 8192
    assert [(p["tokens"], p["runs"]) for p in scaling["variants"]["base"]["points"]] == [(4096, ["base-x0.5-seed0"]),
                                                                                          (8192, ["base-seed0", "base-seed1"])]  # fmt: skip
    assert re.search(r"data scaling: base has [\d,]+ training tokens, not 8,192,000 \(x1000\)", done.stdout)
    match = scaling["variants"]["no-quality"]["tokens_to_match_base"]
    assert len(match["multiple_interval"]) == 2 and match["trained_multiples"] == [0.5, 1.0] and not match["law_identified"]
    report = (out / "report.html").read_text()
    assert signed(compared["val_loss"]["kept"]) in report and "Curation funnel" in report and "(at chance)" in report
    assert "kept</b> decides" in report and "noise" not in json.dumps(results) and "tokens_to_match_base" in report

    # rerun: every step's output is there, nothing is curated, trained or scored again
    outputs = [*out.rglob("part-*.parquet"), *(out / "doc_losses").glob("*.parquet")]  # a rerun's curation report is new
    mtimes = {p: p.stat().st_mtime_ns for p in outputs}
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads((out / "results.json").read_text())["comparison"] == results["comparison"]
    assert {p: p.stat().st_mtime_ns for p in outputs} == mtimes and len(mtimes) > 6
    assert not re.search(r"(training|scoring) \S+-seed\d", again.stdout) and "training base-seed0" in done.stdout


def test_holding_out_skips_a_part_with_no_rows(tmp_path):
    """A folder of pages that all failed extraction writes a part of no rows: the hold-out reads past it."""
    import pyarrow as pa

    from experiments.ablation import BASE, Ablation, AblationSpec

    ablation = Ablation(AblationSpec(variants=[VariantSpec(name="raw", recipe="extract-only")], validation_fraction=0.5),
                        str(tmp_path / "out"), ["in"], "local")  # fmt: skip
    base = ablation.recipes[BASE]
    folder = ablation.curated(BASE) / base.stage_dirs()[1 + [s.stage for s in base.stages].index("extract")]
    folder.mkdir(parents=True)
    empty = pa.table({"id": pa.array([], pa.string()), "source": pa.array([], pa.string()), "text": pa.array([], pa.string())})
    pq.write_table(empty, folder / "part-00000.parquet")
    ids = [f"doc-{i}" for i in range(40)]
    pq.write_table(pa.table({"id": ids, "source": ["web"] * 40, "text": ["some words"] * 40}), folder / "part-00001.parquet")
    held = pq.read_table(ablation.hold_out())
    assert 0 < held.num_rows < 40 and set(held["id"].to_pylist()) <= set(ids)
