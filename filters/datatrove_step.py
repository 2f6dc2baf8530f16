"""Any datatrove filter or formatter, by import path and keyword arguments, as a stage over our tables.

A team's datatrove steps come into a recipe unchanged:

    - stage: datatrove
      params: {step: datatrove.pipeline.filters.GopherQualityFilter, kwargs: {min_doc_words: 50}}

The table's rows become datatrove `Document`s (text, id, the other columns as metadata) and go through the step
in its own batches (`filter_batch` with the step's `batch_size`), so a model-based filter keeps its batching. A
filter's verdict is datatrove's: kept, or dropped with its reason, counted as `<prefix>/<reason>` (the prefix is the
class name in snake case without `Filter`, e.g. `gopher_quality/gopher_short_doc`, or `reason_prefix`). A
filter may edit the text it keeps (C4's line filter does) and a formatter rewrites it: the stage writes the text
back. The step's own counters (`stat_update`) go to the stage's stats under `datatrove`.
"""

import importlib
import re

import pyarrow as pa
from pydantic import Field, field_validator

from filters.base import Annotation, Stage, StageParams


def import_step(path: str) -> type:
    """The class at `package.module.Class` (or `package.module:Class`)."""
    module, _, name = path.replace(":", ".").rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ValueError(f"cannot import {path!r}: {error}") from None


def default_prefix(cls: type) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__.removesuffix("Filter")).lower()


class DatatroveStep(Stage):
    class Params(StageParams):
        step: str = Field(description="import path of a datatrove BaseFilter or BaseFormatter subclass")
        kwargs: dict = Field(default_factory=dict, description="keyword arguments of its constructor")
        reason_prefix: str | None = Field(None, description="drop reasons as <prefix>/<reason>; default from the class name")

        @field_validator("step")
        @classmethod
        def a_datatrove_step(cls, path: str) -> str:
            from datatrove.pipeline.filters.base_filter import BaseFilter
            from datatrove.pipeline.formatters.base import BaseFormatter

            step = import_step(path)
            if not (isinstance(step, type) and issubclass(step, (BaseFilter, BaseFormatter))):
                raise ValueError(f"{path!r} is not a datatrove filter or formatter (BaseFilter / BaseFormatter subclass)")
            return path

    name = "datatrove"
    adds = {"text": pa.string()}

    def setup(self) -> None:
        from datatrove.pipeline.filters.base_filter import BaseFilter

        cls = import_step(self.params.step)
        self.step = cls(**self.params.kwargs)
        self.is_filter = isinstance(self.step, BaseFilter)
        self.prefix = self.params.reason_prefix or default_prefix(cls)

    def annotate(self, table: pa.Table) -> Annotation:
        from datatrove.data import Document
        from datatrove.pipeline.filters.base_filter import get_filter_result
        from datatrove.utils.batching import batched
        from datatrove.utils.stats import Stats

        metadata_columns = [c for c in table.column_names if c not in ("id", "text", "html")]
        metadata = table.select(metadata_columns).to_pylist()
        documents = [Document(text=text, id=doc_id, metadata=meta)
                     for text, doc_id, meta in zip(table["text"].to_pylist(), table["id"].to_pylist(), metadata)]  # fmt: skip
        self.step.stats = Stats(str(self.step))  # this table's counters only: the runner adds them up
        reasons: list[str | None] = []
        if self.is_filter:
            for batch in batched(documents, max(self.step.batch_size, 1)):
                for verdict in self.step.filter_batch(list(batch)):
                    kept, reason = get_filter_result(verdict)
                    reasons.append(None if kept else f"{self.prefix}/{reason}" if reason else self.prefix)
        else:
            for document in documents:
                document.text = self.step.format(document.text)
            reasons = [None] * len(documents)
        counters = {label: stat.total for label, stat in self.step.stats.stats.items()}
        return Annotation(reasons, {"text": [document.text for document in documents]}, {"datatrove": counters} if counters else {})
