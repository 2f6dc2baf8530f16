"""The `datatrove` stage against datatrove itself: the same filters run by datatrove's LocalPipelineExecutor (Parquet
in, Parquet out) keep the same documents with the same text and count the same drop reasons."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.sources import sample
from filters.datatrove_step import DatatroveStep

STEPS = [
    ("datatrove.pipeline.filters.GopherQualityFilter", {}, "gopher_quality"),
    ("datatrove.pipeline.filters.GopherRepetitionFilter", {}, "gopher_repetition"),
    ("datatrove.pipeline.filters.C4QualityFilter", {"filter_no_terminal_punct": False}, "c4_quality"),  # edits text
    ("datatrove.pipeline.filters.FineWebQualityFilter", {}, "fine_web_quality"),
    ("datatrove.pipeline.formatters.SymbolLinesFormatter", {}, None),
]


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> pa.Table:
    """Real-looking pages of every kind the sample snapshot makes (prose, spam, other languages, code, PII)."""
    folder = tmp_path_factory.mktemp("datatrove-step")
    sample.generate(folder, pages=300, files=1, seed=7)
    truth = pq.read_table(folder / sample.TRUTH_FILE).to_pandas()
    truth = truth[truth.body.str.len() > 0]
    return pa.table({"id": list(truth.doc_id), "text": list(truth.body), "language": list(truth.language)})


def in_datatrove(step, table: pa.Table, folder) -> tuple[dict[str, str], dict[str, int]]:
    """Kept documents (id -> text) and the step's counters in a datatrove pipeline over the same rows."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import ParquetWriter

    (folder / "in").mkdir()
    pq.write_table(table, folder / "in" / "docs.parquet")
    LocalPipelineExecutor(pipeline=[ParquetReader(str(folder / "in")), step, ParquetWriter(str(folder / "out"))],
                          tasks=1, logging_dir=str(folder / "logs")).run()  # fmt: skip
    kept = pa.concat_tables([pq.read_table(path, columns=["id", "text"]) for path in sorted((folder / "out").glob("*.parquet"))])
    stats = json.loads((folder / "logs" / "stats.json").read_text())
    counters = next(s["stats"] for s in stats if s["name"] == str(step))
    return dict(zip(kept["id"].to_pylist(), kept["text"].to_pylist())), {k: v["total"] if isinstance(v, dict) else v for k, v in counters.items()}


@pytest.mark.parametrize("path, kwargs, prefix", STEPS, ids=[path.rsplit(".", 1)[1] for path, _, _ in STEPS])
def test_a_datatrove_step_decides_as_in_datatrove(pages, tmp_path, path, kwargs, prefix):
    from filters.datatrove_step import import_step

    ours = DatatroveStep(DatatroveStep.Params(step=path, kwargs=kwargs)).process(pages)
    theirs, counters = in_datatrove(import_step(path)(**kwargs), pages, tmp_path)
    assert dict(zip(ours.kept["id"].to_pylist(), ours.kept["text"].to_pylist())) == theirs
    dropped = {f"{prefix}/{key.removeprefix('dropped_')}": n for key, n in counters.items() if key.startswith("dropped_")}
    assert ours.dropped == dropped and (ours.dropped or not prefix)
    own = ours.stats.get("datatrove", {})  # the step's own counters (C4's removed lines), as datatrove counts them
    assert all(counters[key] == n for key, n in own.items())
    print(f"\n{path.rsplit('.', 1)[1]}: {pages.num_rows} pages, {ours.kept.num_rows} kept in both; drops {ours.dropped}; "
          f"its counters {own}")  # fmt: skip


def test_the_step_is_checked_at_load_with_the_field_named(tmp_path):
    from curation.recipe import load_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nsource: {kind: parquet, source: web}\nstages:\n"
                      "  - {stage: datatrove, params: {step: datatrove.pipeline.filters.NoSuchFilter}}\n")  # fmt: skip
    with pytest.raises(ValueError, match=r"stages\[0\]\.params\.step.*cannot import"):
        load_recipe(str(recipe))
    recipe.write_text("name: r\nsource: {kind: parquet, source: web}\nstages:\n"
                      "  - {stage: datatrove, params: {step: datatrove.pipeline.readers.JsonlReader}}\n")  # fmt: skip
    with pytest.raises(ValueError, match="not a datatrove filter or formatter"):
        load_recipe(str(recipe))
