"""Files of many repositories in one Parquet file, in The Stack's layout (v1's `max_stars_repo_*` columns, v2's
`repo_name`/`detected_licenses`/`star_events_count`, or plain names), local or through fsspec.

A given license, star count and language are kept as columns: the license and language stages use them instead of
detecting their own. Rows without content are counted as `empty_text`, without a repository or path as
`missing_repository`/`missing_path`, binary content that is no text as `undecodable` or `binary_file`, each listed as
`INPUT#row`. The license and repository-document stages see one shard at a time: a repository's files should be in
one Parquet file (The Stack's are sorted by repository).
"""

import hashlib

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from curation.pyarrow_without_pandas import keep_pandas_for_nanosecond_times
from curation.sources import ReadResult
from curation.sources.local_files import decode

# each document column, and the names The Stack's releases give it, first found wins
COLUMNS = {
    "repository": ("repository", "repo_name", "max_stars_repo_name", "repo"),
    "path": ("path", "max_stars_repo_path", "file_path"),
    "text": ("content", "text", "code"),
    "license": ("license", "detected_licenses", "max_stars_repo_licenses", "licenses"),
    "stars": ("stars", "star_events_count", "max_stars_count"),
    "language": ("language", "lang"),
}
REQUIRED = ("repository", "path", "text")


def _column(table: pa.Table, names: tuple[str, ...]) -> pa.ChunkedArray | None:
    return next((table[name] for name in names if name in table.column_names), None)


def _license(value) -> str | None:
    """A list of licenses found in a repository (The Stack's) is one expression: all of them apply."""
    if isinstance(value, list):
        return " AND ".join(value) or None
    return value or None


def read_stack_parquet(path: str, snapshot: str, source: str, schema: pa.Schema) -> ReadResult:
    with fsspec.open(path, "rb") as handle:
        data = handle.read()
    table = pq.read_table(pa.BufferReader(data))
    found = {column: _column(table, names) for column, names in COLUMNS.items()}
    missing = [f"{column} (one of {', '.join(COLUMNS[column])})" for column in REQUIRED if found[column] is None]
    if missing:
        raise ValueError(f"{path}: a code Parquet input needs {'; '.join(missing)}; it has {table.column_names}")
    keep_pandas_for_nanosecond_times(table.schema)  # its columns convert as they always did
    texts = found["text"].to_pylist()  # text, or bytes decoded one by one below
    repositories, paths = found["repository"].to_pylist(), found["path"].to_pylist()
    optional = {column: found[column].to_pylist() if found[column] is not None else [None] * len(texts)
                for column in ("license", "stars", "language")}  # fmt: skip
    result, rows = ReadResult(schema.empty_table(), sha256=hashlib.sha256(data).hexdigest(), bytes_in=len(data)), []
    for index, text in enumerate(texts):
        if repositories[index] is None or paths[index] is None:
            reason = "missing_repository" if repositories[index] is None else "missing_path"
            result.drop(reason, f"{path}#{index}", len(text) if isinstance(text, bytes) else len((text or "").encode()))
            continue
        if isinstance(text, bytes):
            text, reason = decode(text)
            if reason:
                result.drop(reason, f"{path}#{index}", len(texts[index]))
                continue
        if not text:
            result.drop("empty_text", f"{path}#{index}", 0)
            continue
        repository, file = str(repositories[index]), str(paths[index])
        digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()
        rows.append({
            "id": hashlib.sha1(f"{repository}/{file}|{digest}".encode()).hexdigest()[:20],
            "url": f"{repository}/{file}", "text": text, "source": source, "snapshot": snapshot, "warc_file": path,
            "repository": repository, "path": file, "license": _license(optional["license"][index]),
            "stars": int(optional["stars"][index]) if optional["stars"][index] is not None else None,
            "language": optional["language"][index] or None,
        })  # fmt: skip
    result.table = pa.Table.from_pylist(rows, schema=schema)
    return result
