"""Every Parquet file a run writes is read by pandas, pyarrow and Hugging Face `datasets` (which has no type for an
Arrow map, and refuses a whole file for one such column); DuckDB and Spark read every type `datasets` reads."""

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters import STAGES
from shard_contract import TOKEN_SCHEMA


def types_in(data_type: pa.DataType):
    """A type and every type nested in it."""
    yield data_type
    for index in range(data_type.num_fields):
        yield from types_in(data_type.field(index).type)


def no_map(schema_fields) -> list[str]:
    return [name for name, data_type in schema_fields if any(pa.types.is_map(t) for t in types_in(data_type))]


def test_no_stage_adds_and_no_report_or_token_shard_has_a_map_column():
    for name in STAGES:
        stage = STAGES[name]
        assert no_map(stage.adds.items()) == [], name
        if stage.report_schema is not None:
            assert no_map((f.name, f.type) for f in stage.report_schema) == [], name
    assert no_map((f.name, f.type) for f in TOKEN_SCHEMA) == []


def load_every_parquet_folder(run: Path, cache: Path) -> dict[str, int]:
    """Each folder of parts under `run`, loaded as one `datasets` split (as a user points load_dataset at it), and
    each report in the run's root (repositories.parquet, decontamination.parquet) alone, also with pandas; folder or
    report -> rows."""
    from datasets import load_dataset

    groups = {path.parent: sorted(path.parent.glob("*.parquet")) for path in run.rglob("*/*.parquet")}
    groups |= {path: [path] for path in run.glob("*.parquet")}
    assert groups, f"no Parquet under {run}"
    rows = {}
    for folder, paths in sorted(groups.items()):
        files = [str(path) for path in paths]
        count = sum(pq.ParquetFile(path).metadata.num_rows for path in files)
        assert len(pd.concat([pd.read_parquet(path) for path in files])) == count
        if count:  # `datasets` calls a dataset of no rows an error ("corresponds to no data"), whatever the files
            assert load_dataset("parquet", data_files=files, split="train", cache_dir=str(cache)).num_rows == count, folder
        rows[str(folder.relative_to(run))] = count
    return rows


def test_an_empty_part_beside_others_loads_with_datasets(tmp_path):
    """A shard whose documents were all dropped writes a part of no rows; `datasets` failed on the whole folder
    ("BatchSize must be greater than 0") while that part held an empty row group."""
    import fsspec
    from datasets import load_dataset

    from curation.io import ParquetPartWriter, write_parquet_atomic

    fs, table = fsspec.filesystem("file"), pa.table({"id": ["a", "b"], "text": ["one", "two"]})
    write_parquet_atomic(fs, str(tmp_path / "part-00000.parquet"), table)
    write_parquet_atomic(fs, str(tmp_path / "part-00001.parquet"), table.slice(0, 0))
    writer = ParquetPartWriter(fs, str(tmp_path / "part-00002.parquet"))
    writer.write(table.slice(0, 0))
    writer.close()
    for empty in ("part-00001.parquet", "part-00002.parquet"):
        assert pq.read_table(tmp_path / empty).schema.equals(table.schema)
    loaded = load_dataset("parquet", data_files=str(tmp_path / "part-*.parquet"), split="train", cache_dir=str(tmp_path / "hf"))
    assert loaded["text"] == ["one", "two"]


@pytest.mark.slow
def test_a_curated_and_tokenized_web_run_loads_with_datasets(workdir, tmp_path):
    """The web recipe's final stage (pii_counts), its dedup boundaries and reports, and the token shards."""
    rows = load_every_parquet_folder(workdir / "curated", tmp_path / "hf")
    assert rows["10_pii"] > 0 and rows["tokens"] == rows["10_pii"]
    from datasets import load_dataset

    final = load_dataset("parquet", data_files=str(workdir / "curated" / "10_pii" / "*.parquet"), split="train", cache_dir=str(tmp_path / "hf"))
    counts = [row for row in final["pii_counts"] if row]
    assert counts and all(set(entry) == {"type", "count"} for row in counts for entry in row)
