"""Curation stages: one file per stage, each a small class over `pyarrow.Table`, free of Ray."""

from filters.badwords import BadWordsFilter
from filters.base import Stage, StageResult
from filters.code_filters import CodeFilters
from filters.code_language import CodeLanguage
from filters.code_signals import CodeSignals
from filters.datatrove_step import DatatroveStep
from filters.decontam import Decontaminator
from filters.dedup_exact import ExactDedup
from filters.extract import HtmlExtractor
from filters.heuristics import HeuristicFilters
from filters.langid import LanguageFilter
from filters.license import LicenseFilter
from filters.minhash import MinhashDedup
from filters.pii import PiiScrubber
from filters.quality import QualityScorer
from filters.quality_buckets import QualityBuckets
from filters.repository_documents import RepositoryDocuments
from filters.secrets import SecretsRedactor
from filters.url_filter import UrlFilter

STAGES: dict[str, type[Stage]] = {
    stage.name: stage for stage in (
        HtmlExtractor, LanguageFilter, UrlFilter, HeuristicFilters, QualityScorer, PiiScrubber, ExactDedup, MinhashDedup,
        Decontaminator, CodeFilters, QualityBuckets, BadWordsFilter, DatatroveStep, CodeLanguage, CodeSignals,
        RepositoryDocuments, LicenseFilter, SecretsRedactor,
    )
}

__all__ = ["STAGES", "Stage", "StageResult", "BadWordsFilter", "CodeFilters", "CodeLanguage", "CodeSignals", "DatatroveStep", "Decontaminator", "ExactDedup", "MinhashDedup", "HeuristicFilters", "HtmlExtractor", "LanguageFilter", "LicenseFilter", "PiiScrubber", "QualityBuckets", "QualityScorer", "RepositoryDocuments", "SecretsRedactor", "UrlFilter"]
