"""Curation stages: one file per stage, each a small class over `pyarrow.Table`, free of Ray."""

from filters.badwords import BadWordsFilter
from filters.base import Stage, StageResult
from filters.code_filters import CodeFilters
from filters.datatrove_step import DatatroveStep
from filters.decontam import Decontaminator
from filters.dedup_exact import ExactDedup
from filters.extract import HtmlExtractor
from filters.heuristics import HeuristicFilters
from filters.langid import LanguageFilter
from filters.minhash import MinhashDedup
from filters.pii import PiiScrubber
from filters.quality import QualityScorer
from filters.quality_buckets import QualityBuckets
from filters.url_filter import UrlFilter

STAGES: dict[str, type[Stage]] = {
    stage.name: stage for stage in (
        HtmlExtractor, LanguageFilter, UrlFilter, HeuristicFilters, QualityScorer, PiiScrubber, ExactDedup, MinhashDedup,
        Decontaminator, CodeFilters, QualityBuckets, BadWordsFilter, DatatroveStep,
    )
}

__all__ = ["STAGES", "Stage", "StageResult", "BadWordsFilter", "CodeFilters", "DatatroveStep", "Decontaminator", "ExactDedup", "MinhashDedup", "HeuristicFilters", "HtmlExtractor", "LanguageFilter", "PiiScrubber", "QualityBuckets", "QualityScorer", "UrlFilter"]
