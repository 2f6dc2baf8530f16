"""Stages built once per worker process and stage config: a stage's setup() (models, tokenizers, indexes) then runs
once per worker, not once per shard or per task of a dedup pass."""

import pyarrow as pa

from curation.recipe import Recipe, config_hash
from filters import STAGES
from filters.base import Stage

_BUILT: dict[str, Stage] = {}


def worker_stage(recipe: Recipe, index: int, stage_hash: str) -> Stage:
    """recipe.stages[index], ready; `stage_hash` (its chained config hash) tells configs apart."""
    stage = _BUILT.get(stage_hash)
    if stage is None:
        stage = _BUILT[stage_hash] = recipe.build(index)
    stage.ready()
    return stage


def redacted(recipe: Recipe, first: int, table: pa.Table, hashes: list[str] | None = None) -> pa.Table:
    """`table` with its text redacted by every redacting stage (secrets, PII) of recipe.stages[first:], as the documents
    it keeps will be: what is kept beside the run (removed documents, held-out sets) never holds what it removes."""
    for index in range(first, len(recipe.stages)):
        if STAGES[recipe.stages[index].stage].redacts and table.num_rows:
            key = hashes[index + 1] if hashes else config_hash("redact", recipe.stages[index].identity())
            text = pa.array(worker_stage(recipe, index, key).annotate(table).columns["text"], pa.string())
            table = table.set_column(table.column_names.index("text"), pa.field("text", pa.string()), text)
    return table
