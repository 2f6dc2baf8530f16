"""The stage contract shared by every filter and annotator.

A stage looks at a table and says, per row, either "keep" (None) or the reason to drop it, plus the
columns it adds. The base class does the bookkeeping (datatrove's BaseFilter idea): it appends the
columns, splits kept from removed rows and counts drops by reason, so no stage counts by hand.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict


class StageParams(BaseModel):
    """Recipe parameters of a stage; unknown keys are errors so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid")


# Counts per type (PII entities, secret kinds) as a list of structs, sorted by type: an Arrow map would be read by
# pandas, DuckDB and Spark, but Hugging Face `datasets` has no type for it and refuses the whole file.
COUNTS_BY_TYPE = pa.list_(pa.struct([("type", pa.string()), ("count", pa.int32())]))


def counts_by_type(found: dict[str, int]) -> list[dict]:
    """A COUNTS_BY_TYPE value."""
    return [{"type": kind, "count": count} for kind, count in sorted(found.items())]


@dataclass
class StageResult:
    kept: pa.Table
    dropped: dict[str, int]
    removed: pa.Table  # the dropped rows with a `drop_reason` column, for --keep-removed
    stats: dict = field(default_factory=dict)  # stage-specific counters for stats.json (e.g. PII spans per type)


@dataclass
class Annotation:
    reasons: list[str | None]  # one per input row: None keeps the row
    columns: dict[str, list]  # new (or replaced) columns, one value per input row
    stats: dict = field(default_factory=dict)


class Stage:
    name: ClassVar[str]
    Params: ClassVar[type[StageParams]] = StageParams
    requires: ClassVar[tuple[str, ...]] = ("id", "text")
    adds: ClassVar[dict[str, pa.DataType]] = {}
    removes: ClassVar[tuple[str, ...]] = ()
    # columns of `adds` it replaces on purpose whatever wrote them (a repository document is a new document); every
    # other column, `text` aside, is one stage's: a recipe where two stages write it is refused at load
    rewrites: ClassVar[tuple[str, ...]] = ()
    # columns of `adds` the source may already give, which it completes (keeping a given value): not an overwrite
    fills: ClassVar[tuple[str, ...]] = ()
    num_cpus: ClassVar[float] = 1.0
    # GPUs it runs on where the cluster has them (a model's stage): the runner runs it alone in actors holding them
    num_gpus: ClassVar[float] = 0.0
    # each row's outcome depends on that row alone, so the runner may feed the stage a file in batches
    per_document: ClassVar[bool] = True
    report_name: ClassVar[str | None] = None  # a stage whose stats carry "report" rows: the runner writes OUT/<name>.parquet
    report_schema: ClassVar[pa.Schema | None] = None
    # it replaces text that must not be kept (secrets, PII): a part written before it still holds that text, so the
    # runner deletes such parts once the run is finished
    redacts: ClassVar[bool] = False

    def __init__(self, params: StageParams | None = None):
        self.params = params if params is not None else self.Params()
        self._ready = False

    def setup(self) -> None:
        """Load heavy resources (models) once per worker process, not per shard."""

    def loaded_files(self) -> list[str]:
        """The files and folders `setup` loads that the recipe names (models, indexes, lists): their contents are part
        of the stage's identity in a run's manifest, so a changed one reruns the stage."""
        return []

    def annotate(self, table: pa.Table) -> Annotation:
        raise NotImplementedError

    def ready(self) -> None:
        if not self._ready:
            self.setup()
            self._ready = True

    def process(self, table: pa.Table) -> StageResult:
        self.ready()
        missing = [c for c in self.requires if c not in table.column_names]
        if missing:
            raise ValueError(f"stage {self.name!r} needs columns {missing}; the table has {table.column_names}")
        annotation = self.annotate(table)
        if len(annotation.reasons) != table.num_rows:
            raise RuntimeError(f"stage {self.name!r} returned {len(annotation.reasons)} decisions for {table.num_rows} rows")
        for column, values in annotation.columns.items():
            array = pa.array(values, type=self.adds[column])
            if column in table.column_names:
                table = table.set_column(table.column_names.index(column), pa.field(column, array.type), array)
            else:
                table = table.append_column(pa.field(column, array.type), array)
        table = table.drop_columns([c for c in self.removes if c in table.column_names])
        keep = pa.array([reason is None for reason in annotation.reasons], type=pa.bool_())
        removed_reasons = [reason for reason in annotation.reasons if reason is not None]
        removed = table.filter(pc.invert(keep)).append_column("drop_reason", pa.array(removed_reasons, pa.string()))
        return StageResult(table.filter(keep), dict(Counter(removed_reasons)), removed, annotation.stats)
