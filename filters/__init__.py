"""Curation stages: one file per stage, each a small class over `pyarrow.Table`, free of Ray.

A stage's module is imported the first time its name is looked up, so a process (the driver, each Ray worker) imports
only the stages of the recipe it runs: importing all of them took ~1.1 s and ~90 MiB in every process (numba, the
benchmark indexes, Presidio, datatrove) for stages most recipes never use.
"""

from collections.abc import Iterator, Mapping
from importlib import import_module

from filters.base import Stage, StageResult

# stage name -> (module, class, the OUT/<report>.parquet it writes): names and reports are read without importing
_REGISTRY: dict[str, tuple[str, str, str | None]] = {
    "extract": ("filters.extract", "HtmlExtractor", None),
    "langid": ("filters.langid", "LanguageFilter", None),
    "url_filter": ("filters.url_filter", "UrlFilter", None),
    "heuristics": ("filters.heuristics", "HeuristicFilters", None),
    "quality": ("filters.quality", "QualityScorer", None),
    "pii": ("filters.pii", "PiiScrubber", None),
    "dedup_exact": ("filters.dedup_exact", "ExactDedup", None),
    "minhash": ("filters.minhash", "MinhashDedup", None),
    "decontam": ("filters.decontam", "Decontaminator", "decontamination"),
    "code_filters": ("filters.code_filters", "CodeFilters", None),
    "quality_buckets": ("filters.quality_buckets", "QualityBuckets", None),
    "score_filter": ("filters.score_filter", "ScoreFilter", None),
    "model_score": ("filters.model_score", "ModelScorer", None),
    "perplexity": ("filters.perplexity", "PerplexityScorer", None),
    "score_ensemble": ("filters.score_ensemble", "ScoreEnsemble", None),
    "badwords": ("filters.badwords", "BadWordsFilter", None),
    "datatrove": ("filters.datatrove_step", "DatatroveStep", None),
    "code_language": ("filters.code_language", "CodeLanguage", None),
    "code_signals": ("filters.code_signals", "CodeSignals", None),
    "repository_documents": ("filters.repository_documents", "RepositoryDocuments", None),
    "license": ("filters.license", "LicenseFilter", "repositories"),
    "secrets": ("filters.secrets", "SecretsRedactor", None),
}
REPORT_NAMES: dict[str, str] = {name: report for name, (_, _, report) in _REGISTRY.items() if report}


class _Stages(Mapping[str, type[Stage]]):
    """Stage name -> class, importing a stage's module on first lookup; `in` and iteration need no import."""

    def __getitem__(self, name: str) -> type[Stage]:
        module, class_name, _ = _REGISTRY[name]
        return getattr(import_module(module), class_name)

    def __contains__(self, name: object) -> bool:
        return name in _REGISTRY

    def __iter__(self) -> Iterator[str]:
        return iter(_REGISTRY)

    def __len__(self) -> int:
        return len(_REGISTRY)


STAGES = _Stages()


def __getattr__(attribute: str):
    """`from filters import HtmlExtractor` imports that stage alone."""
    for module, class_name, _ in _REGISTRY.values():
        if class_name == attribute:
            return getattr(import_module(module), class_name)
    raise AttributeError(f"module 'filters' has no attribute {attribute!r}")


__all__ = ["STAGES", "REPORT_NAMES", "Stage", "StageResult", *(class_name for _, class_name, _ in _REGISTRY.values())]
