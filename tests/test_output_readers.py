"""Every Parquet file a run writes is read by pandas, pyarrow, Hugging Face `datasets` (which has no type for an
Arrow map, and refuses a whole file for one such column), DuckDB and Spark, as the README promises."""

import os
import shutil
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


def parquet_groups(run: Path) -> dict[Path, list[Path]]:
    """Each folder of parts under `run` and each report in the run's root (repositories.parquet,
    decontamination.parquet) -> its files."""
    groups = {path.parent: sorted(path.parent.glob("*.parquet")) for path in run.rglob("*/*.parquet")}
    groups |= {path: [path] for path in run.glob("*.parquet")}
    assert groups, f"no Parquet under {run}"
    return dict(sorted(groups.items()))


def pattern(group: Path) -> str:
    """What a user points DuckDB or Spark at: a report's file, or a folder's parts (tokens/ holds its tokenizer's JSON
    beside them, which a bare folder path would read as Parquet)."""
    return str(group / "*.parquet") if group.is_dir() else str(group)


def load_every_parquet_folder(run: Path, cache: Path) -> dict[str, int]:
    """Each folder of parts under `run`, loaded as one `datasets` split (as a user points load_dataset at it), and
    each report in the run's root alone, also with pandas; folder or report -> rows."""
    from datasets import load_dataset

    rows = {}
    for folder, paths in parquet_groups(run).items():
        files = [str(path) for path in paths]
        count = sum(pq.ParquetFile(path).metadata.num_rows for path in files)
        assert len(pd.concat([pd.read_parquet(path) for path in files])) == count
        if count:  # `datasets` calls a split of no rows an error ("corresponds to no data"), whatever the files
            assert load_dataset("parquet", data_files=files, split="train", cache_dir=str(cache)).num_rows == count, folder
        else:
            assert list(load_dataset("parquet", data_files=files, split="train", streaming=True)) == [], folder
        rows[str(folder.relative_to(run))] = count
    return rows


def expected_rows(paths: list[Path]) -> list[dict]:
    return pa.concat_tables(pq.read_table(path) for path in paths).to_pylist()


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


def test_an_empty_report_reads_everywhere_and_streams_with_datasets(tmp_path):
    """A run whose decontamination matched nothing writes decontamination.parquet with no rows. `datasets` (5.2)
    refuses any split of no rows unless streamed, however the file is written ("corresponds to no data"); an empty
    row group would fail the stream too ("BatchSize must be greater than 0"), so the file has none."""
    import duckdb
    import fsspec
    from datasets import Features, load_dataset

    from curation.io import write_parquet_atomic

    schema, path = STAGES["decontam"].report_schema, tmp_path / "decontamination.parquet"
    write_parquet_atomic(fsspec.filesystem("file"), str(path), schema.empty_table())
    assert pq.read_table(path).schema.equals(schema) and pq.ParquetFile(path).metadata.num_row_groups == 0
    assert list(pd.read_parquet(path).columns) == schema.names and len(pd.read_parquet(path)) == 0
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{path}')").fetchall() == [(0,)]
    assert [column[0] for column in duckdb.sql(f"SELECT * FROM read_parquet('{path}')").description] == schema.names
    streamed = load_dataset("parquet", data_files=str(path), split="train", streaming=True)
    assert list(streamed) == [] and streamed.features == Features.from_arrow_schema(schema)


@pytest.mark.slow
def test_a_curated_and_tokenized_web_run_loads_with_datasets(workdir, tmp_path):
    """The web recipe's final stage (pii_counts), its dedup boundaries and reports, and the token shards."""
    rows = load_every_parquet_folder(workdir / "curated", tmp_path / "hf")
    assert rows["10_pii"] > 0 and rows["tokens"] == rows["10_pii"]
    from datasets import load_dataset

    final = load_dataset("parquet", data_files=str(workdir / "curated" / "10_pii" / "*.parquet"), split="train", cache_dir=str(tmp_path / "hf"))
    counts = [row for row in final["pii_counts"] if row]
    assert counts and all(set(entry) == {"type", "count"} for row in counts for entry in row)


@pytest.mark.slow
def test_a_curated_and_tokenized_web_run_reads_in_duckdb(workdir):
    """Every folder and report, row for row as pyarrow reads it: the final stage's lists of structs (pii_counts), the
    token lists, parts of no rows."""
    import duckdb

    groups = parquet_groups(workdir / "curated")
    assert {"10_pii", "tokens"} <= {group.name for group in groups}
    for group, paths in groups.items():
        expected = expected_rows(paths)
        parts = f"read_parquet('{pattern(group)}')"
        assert duckdb.sql(f"SELECT count(*) FROM {parts}").fetchall() == [(len(expected),)], group
        rows = duckdb.sql(f"SELECT * FROM {parts}").fetchall()
        assert rows == [tuple(row.values()) for row in expected], group


def local_spark():
    """A one-core local SparkSession, or a skip naming what is missing: pyspark (a 400 MB install, in no extra) or
    the Java runtime it starts."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install pyspark); .ci/run installs it")
    if shutil.which("java") is None and "JAVA_HOME" not in os.environ:
        pytest.skip("Spark needs a Java runtime (apt-get install default-jre-headless)")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    return builder.getOrCreate()


@pytest.mark.slow
def test_a_curated_and_tokenized_web_run_reads_in_spark(workdir):
    """Every folder and report as DuckDB's test reads them; Spark orders a folder's rows as it likes."""
    spark = local_spark()
    try:
        for group, paths in parquet_groups(workdir / "curated").items():
            expected = expected_rows(paths)
            frame = spark.read.parquet(pattern(group))
            assert frame.count() == len(expected), group
            rows = [row.asDict(recursive=True) for row in frame.collect()]
            assert sorted(map(repr, rows)) == sorted(map(repr, expected)), group
    finally:
        spark.stop()
