"""Repository-level documents (StarCoder2): a repository's files as one document, in a stable order (by path), so a
model learns across the files of a project: `<repo_name>NAME<file_sep>PATH\\nCODE<file_sep>PATH\\nCODE...`.

Run it after the per-file stages (near-dedup and decontamination judge files). The first file's row carries the
document (its `id` a hash of the repository and its files' ids, `url` the repository, `path` null, `language` the
one with the most bytes, `files` how many it holds); the other rows are counted as `repository/merged`. A file holding a
marker itself could not be split back, so it is left out and counted (`repository/marker_in_file`).
"""

import hashlib
from collections import Counter, defaultdict

import pyarrow as pa

from filters.base import Annotation, Stage, StageParams
from shard_contract import FILE_SEP_TOKEN, REPO_NAME_TOKEN


def repository_document(repository: str, files: list[tuple[str, str]]) -> str:
    return REPO_NAME_TOKEN + repository + "".join(f"{FILE_SEP_TOKEN}{path}\n{text}" for path, text in files)


def split_repository_document(document: str) -> tuple[str, list[tuple[str, str]]]:
    """The repository's name and its (path, text) files, back from a repository document."""
    head, *parts = document.removeprefix(REPO_NAME_TOKEN).split(FILE_SEP_TOKEN)
    return head, [tuple(part.split("\n", 1)) for part in parts]


class RepositoryDocuments(Stage):
    name = "repository_documents"
    Params = StageParams
    requires = ("id", "text", "url", "repository", "path")
    adds = {"id": pa.string(), "text": pa.string(), "url": pa.string(), "path": pa.string(), "language": pa.string(),
            "files": pa.int32()}  # fmt: skip
    rewrites = ("id", "url", "path", "language")
    per_document = False  # a repository's files are merged: the runner gives the stage a whole shard

    def annotate(self, table: pa.Table) -> Annotation:
        texts, paths = table["text"].to_pylist(), table["path"].to_pylist()
        repositories = table["repository"].to_pylist()
        languages = table["language"].to_pylist() if "language" in table.column_names else [None] * table.num_rows
        columns = {"id": table["id"].to_pylist(), "text": texts[:], "url": table["url"].to_pylist(), "path": paths[:],
                   "language": languages[:], "files": [1] * table.num_rows}  # fmt: skip
        reasons: list[str | None] = ["repository/merged"] * table.num_rows
        members = defaultdict(list)
        for row, (text, path) in enumerate(zip(texts, paths)):
            if REPO_NAME_TOKEN in (text or "") or FILE_SEP_TOKEN in (text or "") or "\n" in (path or ""):
                reasons[row] = "repository/marker_in_file"
            else:
                members[repositories[row]].append(row)
        for repository, rows in members.items():
            rows.sort(key=lambda row: paths[row] or "")
            first, weights = rows[0], Counter()
            for row in rows:
                weights[languages[row]] += len(texts[row] or "")
            reasons[first] = None
            columns["text"][first] = repository_document(repository, [(paths[row] or "", texts[row] or "") for row in rows])
            members_key = "|".join(columns["id"][row] for row in rows)  # unique where a repository spans shards
            columns["id"][first] = hashlib.sha1(f"repository|{repository}|{members_key}".encode()).hexdigest()[:20]
            columns["url"][first], columns["path"][first] = repository, None
            columns["language"][first] = weights.most_common(1)[0][0]
            columns["files"][first] = len(rows)
        return Annotation(reasons, columns, {"repositories": len(members)})
