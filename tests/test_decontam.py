"""Benchmark decontamination: the format registry, the n-gram index, the stage's policies, and recall / false
positives with the real HumanEval and GSM8K files."""

import gzip
import json
import random
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from curation.recipe import parse_recipe
from curation.sources import sample
from filters.benchmark_index import BenchmarkSpec, NgramIndex, load_items
from filters.decontam import Decontaminator
from tests.conftest import shared

QUESTION = "A train leaves the station at nine and travels sixty miles every hour until it reaches the coast at noon"


def test_builtin_formats_read_their_layouts(tmp_path):
    (tmp_path / "mmlu").mkdir()
    (tmp_path / "mmlu" / "a_test.csv").write_text('"What is 2+2, exactly?",3,4,5,6,B\n')  # the original headerless layout
    (tmp_path / "mmlu_header.csv").write_text("question,choice0,choice1,choice2,choice3,answer\nWhich one?,x,y,z,w,A\n")
    pq.write_table(pa.table({"question": ["Q?"], "choices": [["p", "q"]], "answer": [1]}), tmp_path / "mmlu_hf.parquet")
    with gzip.open(tmp_path / "arc.jsonl.gz", "wt") as handle:
        handle.write(json.dumps({"id": "Mercury_1", "question": {"stem": "Which gas?", "choices": [{"text": "oxygen", "label": "A"}, {"text": "argon", "label": "B"}]}}) + "\n")
        handle.write(json.dumps({"id": "Mercury_2", "question": "Which metal?", "choices": {"text": ["iron", "gold"], "label": ["A", "B"]}}) + "\n")
    (tmp_path / "hellaswag.jsonl").write_text(json.dumps({"ind": 7, "ctx": "A man sits", "endings": ["and eats.", "and runs."]}) + "\n")
    question = "What is 2+2, exactly?"
    assert load_items(BenchmarkSpec(name="m", format="mmlu", path=str(tmp_path / "mmlu"))) == [("a_test.csv:0", [f"{question}\n{c}" for c in "3456"])]
    assert load_items(BenchmarkSpec(name="m", format="mmlu", path=str(tmp_path / "mmlu_header.csv")))[0][1] == [f"Which one?\n{c}" for c in "xyzw"]
    assert load_items(BenchmarkSpec(name="m", format="mmlu", path=str(tmp_path / "mmlu_hf.parquet")))[0][1] == ["Q?\np", "Q?\nq"]
    assert load_items(BenchmarkSpec(name="a", format="arc", path=str(tmp_path / "arc.jsonl.gz"))) == [
        ("Mercury_1", ["Which gas?\noxygen", "Which gas?\nargon"]), ("Mercury_2", ["Which metal?\niron", "Which metal?\ngold"])
    ]
    assert load_items(BenchmarkSpec(name="h", format="hellaswag", path=str(tmp_path / "hellaswag.jsonl"))) == [("7", ["A man sits\nand eats.", "A man sits\nand runs."])]
    (tmp_path / "mine.jsonl").write_text(json.dumps({"key": "k1", "prompt": "p", "target": "t"}) + "\n")
    custom = BenchmarkSpec(name="mine", fields=[["prompt"], ["target"]], id_field="key", path=str(tmp_path / "mine.jsonl"))
    assert load_items(custom) == [("k1", ["p\nt"])]
    shipped = {spec.format: load_items(spec) for spec in (BenchmarkSpec(name="h", format="humaneval"), BenchmarkSpec(name="g", format="gsm8k"))}
    assert len(shipped["humaneval"]) == 164 and len(shipped["gsm8k"]) == 1319  # the copies in filters/assets/benchmarks


def test_a_multiple_choice_leak_is_found_through_its_correct_ending(tmp_path):
    """HellaSwag: the context is under 13 words, a leaking page holds it with the correct ending only."""
    context = "A woman is outside with a bucket and a dog. The dog is running around trying to"
    endings = ["avoid a bath while she gets the bucket of soapy water ready for it.", "dance on the grass with a ball.",
               "get into a bath. she gets the dog wet, then it runs away again.", "sleep in the sun all afternoon long."]  # fmt: skip
    (tmp_path / "hs.jsonl").write_text(json.dumps({"ind": 24, "ctx": context, "endings": endings, "label": 2}) + "\n")
    stage = Decontaminator(Decontaminator.Params(benchmarks=[BenchmarkSpec(name="hellaswag", format="hellaswag", path=str(tmp_path / "hs.jsonl"))]))
    filler = " ".join(f"word{i}" for i in range(60))
    page = f"{filler} {context} {endings[2]} {filler}"
    result = stage.process(pa.table({"id": ["leak", "context-only"], "url": ["u1", "u2"], "text": [page, f"{filler} {context[:40]} {filler}"]}))
    assert result.dropped == {"decontam/hellaswag": 1} and result.kept["id"].to_pylist() == ["context-only"]
    assert [(r["id"], r["item_id"]) for r in result.stats["report"]] == [("leak", "24")]  # one row per item, not per ending


def test_bad_benchmark_files_are_named(tmp_path):
    (tmp_path / "broken.jsonl").write_text('{"question": "ok", "answer": "fine"}\n{not json\n')
    with pytest.raises(ValueError, match=r"broken.jsonl: line 2 is not JSON"):
        load_items(BenchmarkSpec(name="g", format="gsm8k", path=str(tmp_path / "broken.jsonl")))
    (tmp_path / "other.jsonl").write_text(json.dumps({"unrelated": 1}) + "\n")
    with pytest.raises(ValueError, match=r"other.jsonl row 0 has none of the fields"):
        load_items(BenchmarkSpec(name="g", format="gsm8k", path=str(tmp_path / "other.jsonl")))
    with pytest.raises(ValidationError, match="benchmark file not found: .*missing.jsonl"):
        BenchmarkSpec(name="g", format="gsm8k", path=str(tmp_path / "missing.jsonl"))
    with pytest.raises(Exception, match=r"stages\[0\]\.params\.benchmarks\[0\]: benchmark file not found: nowhere/test.jsonl"):
        parse_recipe({"name": "x", "stages": [{"stage": "decontam", "params": {"benchmarks": [{"name": "g", "format": "gsm8k", "path": "nowhere/test.jsonl"}]}}]}, "x.yaml")
    with pytest.raises(ValidationError, match="unknown format"):
        BenchmarkSpec(name="g", format="nope", path="x")
    with pytest.raises(Exception, match=r"stages\[0\]\.params: give benchmarks"):
        parse_recipe({"name": "x", "stages": [{"stage": "decontam", "params": {}}]}, "x.yaml")


@pytest.fixture()
def gsm_like(tmp_path):
    rows = [{"question": QUESTION + "?", "answer": "It travels three hours, so 3 * 60 = 180 miles.\n#### 180"},
            {"question": "Short one here?", "answer": "2"}]  # fmt: skip
    (tmp_path / "g.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return BenchmarkSpec(name="gsm", format="gsm8k", path=str(tmp_path / "g.jsonl"))


def test_index_save_load_and_short_items(gsm_like, tmp_path):
    index = NgramIndex.build([gsm_like], n=13, min_words=3)
    # the long item normalizes to 30 words ("*", "=", "####" and punctuation go): 18 13-grams; the short one is one key
    assert index.stats["gsm"] == {"items": 2, "too_short": 0, "ngrams": 18 + 1}
    assert sorted(index.keys) == [4, 13]  # the short item (4 words) is indexed whole
    index.save(str(tmp_path / "index"))
    loaded = NgramIndex.load(str(tmp_path / "index"))
    assert loaded.items.equals(index.items) and all((loaded.keys[k][0] == index.keys[k][0]).all() for k in index.keys)
    with pytest.raises(FileNotFoundError, match="curate decontam index"):
        NgramIndex.load(str(tmp_path))


def test_drop_and_cut_policies(gsm_like):
    filler = " ".join(f"word{i}" for i in range(80))
    table = pa.table({
        "id": ["hit", "clean", "short", "tail"],
        "url": ["u1", "u2", "u3", "u4"],
        "text": [f"{filler}\n\n{QUESTION.upper()}!!\n\n{filler}", filler, "Short one here? 2", f"{filler} {QUESTION}"],
    })  # fmt: skip
    dropped = Decontaminator(Decontaminator.Params(benchmarks=[gsm_like])).process(table)
    assert dropped.kept["id"].to_pylist() == ["clean", "short"] and dropped.dropped == {"decontam/gsm": 2}
    assert dropped.stats["decontam_documents"] == dropped.stats["decontam_hits"] == {"gsm": 2}
    assert [(r["id"], r["item_id"], r["action"]) for r in dropped.stats["report"]] == [("hit", "g.jsonl:0", "drop"), ("tail", "g.jsonl:0", "drop")]
    cut = Decontaminator(Decontaminator.Params(benchmarks=[gsm_like], policy="cut", margin=5, min_remaining_words=60)).process(table)
    assert cut.kept["id"].to_pylist() == ["hit", "clean", "short", "tail"]
    text = cut.kept["text"][0].as_py()
    assert "TRAIN" not in text and text.startswith("word0 word1") and text.endswith("word78 word79")
    assert "word74\n" in text and "\nword5 " in text  # five words of margin on each side went with the match
    assert cut.kept["decontam_items"].to_pylist() == [["gsm/g.jsonl:0"], [], [], ["gsm/g.jsonl:0"]]
    assert cut.kept["text"][3].as_py() == " ".join(f"word{i}" for i in range(75))
    strict = Decontaminator(Decontaminator.Params(benchmarks=[gsm_like], policy="cut", min_remaining_words=200)).process(table)
    assert strict.dropped == {"decontam/gsm": 2}  # too little would remain


def perturb(text: str, rng: random.Random) -> str:
    """Case flips, extra whitespace and newlines, punctuation dropped or swapped."""
    words = []
    for word in text.split():
        word = word.upper() if rng.random() < 0.3 else word.lower() if rng.random() < 0.3 else word
        word = re.sub(r"[.,;:!?()\"']", lambda m: rng.choice(["", "!", ",", m.group()]), word)
        words.append(word + rng.choice([" ", "  ", "\n", " \t "]))
    return "".join(words)


@pytest.fixture(scope="module")
def real_benchmarks():
    return [
        BenchmarkSpec(name="gsm8k", format="gsm8k", path=str(shared("benchmarks/gsm8k/test.jsonl"))),
        BenchmarkSpec(name="humaneval", format="humaneval", path=str(shared("benchmarks/humaneval/HumanEval.jsonl.gz"))),
    ]


@pytest.fixture(scope="module")
def snapshot_bodies(tmp_path_factory):
    folder = tmp_path_factory.mktemp("decontam-sample")
    sample.generate(folder, pages=3000, files=2, seed=7)
    return pq.read_table(folder / "truth.parquet").to_pandas()


def test_recall_on_humaneval_and_gsm8k_items_hidden_in_documents(real_benchmarks, snapshot_bodies):
    rng = random.Random(0)
    items = [(spec.name, item_id, texts[0]) for spec in real_benchmarks for item_id, texts in load_items(spec)]
    clean = [body for body in snapshot_bodies[snapshot_bodies.kind == "clean"].body if len(body.split()) > 200]
    cases = {"verbatim": [], "perturbed": [], "middle of a long page": [], "middle 60% of its words, mid-page": []}
    for name, item_id, text in items:
        host = rng.choice(clean)
        cases["verbatim"].append(text)
        cases["perturbed"].append(perturb(text, rng))
        middle = len(host) // 2
        cases["middle of a long page"].append(host[:middle] + " " + text + " " + host[middle:])
        words = text.split()
        fragment = " ".join(words[len(words) // 5 : len(words) - len(words) // 5])
        cases["middle 60% of its words, mid-page"].append(host[:middle] + " " + fragment + " " + host[middle:])
    stage = Decontaminator(Decontaminator.Params(benchmarks=real_benchmarks))
    for case, texts in cases.items():
        table = pa.table({"id": [f"doc-{k}" for k in range(len(items))], "url": [None] * len(items), "text": texts})
        result = stage.process(table)
        found = {(r["id"], f"{r['benchmark']}/{r['item_id']}") for r in result.stats["report"]}
        recall = sum((f"doc-{k}", f"{n}/{i}") in found for k, (n, i, _) in enumerate(items)) / len(items)  # its own item
        print(f"decontam recall, {case}: {recall:.4f} of {len(items)} items (HumanEval 164 + GSM8K 1,319)")
        assert recall >= 0.99, case


def test_clean_sample_pages_are_not_flagged(real_benchmarks, snapshot_bodies):
    bodies = snapshot_bodies[snapshot_bodies.kind != "empty"]
    table = pa.table({"id": [str(i) for i in range(len(bodies))], "url": list(bodies.url), "text": list(bodies.body)})
    result = Decontaminator(Decontaminator.Params(benchmarks=real_benchmarks)).process(table)
    flagged = {r["url"] for r in result.stats["report"]}
    for kind in ("clean", "code", "benchmark"):
        pages = bodies[bodies.kind == kind]
        rate = pages.url.isin(flagged).mean()
        print(f"decontam false positives on {len(pages)} {kind} pages of the sample: {rate:.4f}")
        assert rate <= 0.001, kind
    leaks = bodies[bodies.kind == "leak"]
    assert len(leaks) == 18 and leaks.url.isin(flagged).all()  # the planted real items are all found
    found = {(r["url"], f"{r['benchmark']}/{r['item_id']}") for r in result.stats["report"]}
    assert all((url, item) in found for url, item in zip(leaks.url, leaks.benchmark_item))
    assert len(flagged - set(leaks.url)) <= 0.001 * len(bodies)


@pytest.mark.slow
def test_cli_index_then_run_writes_the_report(gsm_like, tmp_path):
    import subprocess
    import sys

    filler = " ".join(f"word{i}" for i in range(80))
    pq.write_table(pa.table({"id": ["hit", "clean"], "url": ["https://a/1", "https://a/2"], "text": [f"{filler} {QUESTION} {filler}", filler]}), tmp_path / "docs.parquet")
    curate = [sys.executable, "-m", "curation"]
    built = subprocess.run(curate + ["decontam", "index", "--benchmarks", f"gsm8k={gsm_like.path}", "--output", str(tmp_path / "index")],
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert built.returncode == 0 and "gsm8k" in built.stdout, built.stdout + built.stderr
    (tmp_path / "recipe.yaml").write_text(
        f"name: d\nsource: {{kind: parquet}}\nstages:\n  - stage: decontam\n    params: {{index: {tmp_path / 'index'}, policy: drop}}\n"
    )
    done = subprocess.run(curate + ["run", str(tmp_path / "recipe.yaml"), "--input", str(tmp_path / "docs.parquet"), "--output", str(tmp_path / "run"), "--num-cpus", "1"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "decontam/gsm8k" in done.stdout
    report = pq.read_table(tmp_path / "run" / "decontamination.parquet").to_pylist()
    assert report == [{"id": "hit", "url": "https://a/1", "benchmark": "gsm8k", "item_id": "g.jsonl:0", "ngrams": 8, "action": "drop"}]  # 20 words: 8 13-grams
    assert pq.read_table(tmp_path / "run" / "01_decontam").to_pydict()["id"] == ["clean"]
