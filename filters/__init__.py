"""Curation stages: one file per stage, each a small class over `pyarrow.Table`, free of Ray."""

from filters.base import Stage, StageResult
from filters.extract import HtmlExtractor
from filters.langid import LanguageFilter

STAGES: dict[str, type[Stage]] = {
    HtmlExtractor.name: HtmlExtractor,
    LanguageFilter.name: LanguageFilter,
}

__all__ = ["STAGES", "Stage", "StageResult", "HtmlExtractor", "LanguageFilter"]
