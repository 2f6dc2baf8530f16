"""Stages built once per worker process and stage config: a stage's setup() (models, tokenizers, indexes) then runs
once per worker, not once per shard or per task of a dedup pass."""

from curation.recipe import Recipe
from filters.base import Stage

_BUILT: dict[str, Stage] = {}


def worker_stage(recipe: Recipe, index: int, stage_hash: str) -> Stage:
    """recipe.stages[index], ready; `stage_hash` (its chained config hash) tells configs apart."""
    stage = _BUILT.get(stage_hash)
    if stage is None:
        stage = _BUILT[stage_hash] = recipe.build(index)
    stage.ready()
    return stage
