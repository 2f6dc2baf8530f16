"""Both notebooks, executed end to end against a small real curation run (every stage with figures) and a real
training run, from notebooks/ (where Jupyter and nbconvert start their kernel) with the run folders in RUN_DIR and
TRAIN_DIR, and `curate report` over the same runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curation.quality import train as train_quality
from curation.sources import sample

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
FILTER_FIGURES = 7  # funnel, removal reasons, languages, quality, PII, duplicate clusters, decontamination
TRAINING_FIGURES = 6  # loss, validation loss, tokens, lr, grad norm, throughput (MFU is unknown on CPUs)


def run(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("notebooks")
    sample.generate(folder / "snapshot", pages=240, files=2, seed=11)
    truth = pq.read_table(folder / "snapshot" / "truth.parquet").to_pandas()
    examples = [(body, 1) for body in truth[truth.kind == "clean"].body] + [(body, 0) for body in truth[truth.kind.isin(["spam", "foreign"])].body]
    train_quality(examples, str(folder / "quality.bin"), epoch=10)
    problems = truth[truth.kind == "benchmark"].body.str.split("\n\n").explode().head(20)
    (folder / "bench.jsonl").write_text("".join(json.dumps({"question": p, "answer": ""}) + "\n" for p in problems))
    recipe = (ROOT / "curation" / "recipes" / "fineweb-snapshot.yaml").read_text()
    recipe = recipe.replace("  - stage: decontam\n", "  - stage: decontam\n    overwrite: true  # after the sample's own below\n")
    recipe = recipe.replace("  - stage: heuristics\n", f"""  - stage: decontam
    params: {{benchmarks: [{{name: sample-math, format: gsm8k, path: {folder / 'bench.jsonl'}}}]}}
  - stage: heuristics
""").replace("  - stage: dedup_exact\n", f"""  - stage: quality
    params: {{model_path: {folder / 'quality.bin'}, threshold: 0.2}}
    overwrite: true
  - stage: quality_buckets
  - stage: dedup_exact
""")
    (folder / "recipe.yaml").write_text(recipe)
    run("curation", "run", str(folder / "recipe.yaml"), "--input", str(folder / "snapshot" / "*.warc.gz"), "--output", "curated",
        "--num-cpus", "2", "--keep-removed", cwd=folder)  # fmt: skip
    run("curation", "tokenize", "curated", "--vocab-size", "1024", "--validation-fraction", "0.2", cwd=folder)
    (folder / "mix.yaml").write_text("name: nb\nsources:\n  web: {paths: ['curated/tokens/part-*.parquet']}\n  web_hq: "
                                     "{paths: ['curated/tokens/part-*.parquet'], where: {column: bucket, equals: hq}, max_epochs: 100}\n"
                                     "phases:\n  - {name: a, fraction: 0.5, weights: {web: 1}}\n  - {name: b, weights: {web: 0.5, web_hq: 0.5}}\n")  # fmt: skip
    run("training", "--mixture", "mix.yaml", "--steps", "6", "--eval-every", "2", "--out", "trained", cwd=folder)
    return folder / "curated", folder / "trained"


def execute(notebook: str, env: dict[str, str], cwd: Path = NOTEBOOKS, show: str | None = None):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), "stored with outputs"
    if show:  # only the title and the setup cell, then print the folder it resolved; no run folder is read
        nb.cells = nb.cells[:2] + [nbformat.v4.new_code_cell(f"print({show})")]
    inherited = {k: v for k, v in os.environ.items() if k not in ("RUN_DIR", "TRAIN_DIR")}  # not a developer's own
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}})
    client.execute(env=inherited | env)
    outputs = [output for cell in nb.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"], outputs
    return outputs


def test_filter_stats_notebook_draws_every_figure(runs):
    outputs = execute("filter_stats.ipynb", {"RUN_DIR": str(runs[0])})
    figures = sum("image/png" in o.get("data", {}) for o in outputs)
    printed = " ".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert figures == FILTER_FIGURES, printed  # nothing is missing from this run
    tables = " ".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "decontam/sample-math" in tables and "removed text" in tables and "05_decontam" in tables


def test_training_notebook_draws_every_figure(runs):
    outputs = execute("training_run.ipynb", {"TRAIN_DIR": str(runs[1])})
    assert sum("image/png" in o.get("data", {}) for o in outputs) == TRAINING_FIGURES


@pytest.mark.parametrize("notebook, variable, cwd, env, expected", [
    ("filter_stats.ipynb", "RUN", NOTEBOOKS, {}, ROOT / "runs" / "fineweb-snapshot"),
    ("training_run.ipynb", "TRAIN", ROOT, {}, ROOT / "runs" / "train"),
    ("training_run.ipynb", "TRAIN", NOTEBOOKS, {"TRAIN_DIR": "runs/other"}, ROOT / "runs" / "other"),
    ("filter_stats.ipynb", "RUN", ROOT, {"RUN_DIR": "s3://bucket/run"}, "s3://bucket/run"),
], ids=["default-from-notebooks", "default-from-root", "relative-variable", "url-variable"])  # fmt: skip
def test_notebook_finds_run_folder_from_either_working_directory(notebook, variable, cwd, env, expected):
    outputs = execute(notebook, env, cwd=cwd, show=variable)
    assert [o.get("text", "").strip() for o in outputs] == [str(expected)]


def test_curate_report_has_every_section(runs):
    from curation.report import SECTIONS
    from training.plots import SECTIONS as TRAINING

    html_file = runs[0] / "report.html"
    run("experiments", "report", str(runs[0]), "--training", str(runs[1]), cwd=runs[0].parent)
    page = html_file.read_text()
    for title, _, _ in SECTIONS + TRAINING:
        assert f"<h2>{title}</h2>" in page, title
    assert page.count("<img") == FILTER_FIGURES + TRAINING_FIGURES and page.count("not in this run") == 2  # MFU on CPU; model scores
    from training import metrics

    validated = metrics.load(str(runs[1])).dropna(subset=["val_loss"])  # the 2-phase run's curves, per source and bucket
    assert list(validated.step) == [2, 4, 6] and set(validated.phase) == {"a", "b"}
    assert validated[["val_loss_per_source.web", "val_loss_per_source.web_hq"]].notna().all().all()
