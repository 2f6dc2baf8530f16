"""Figures and tables of a curation run, for notebooks, scripts and `curate report`.

Each function takes a run folder and returns a matplotlib Figure (or a DataFrame), or None when the run has no
such stage (no quality stage, no decontamination, ...), so a notebook cell or the HTML report just says so. They
read the run through `curation.stats.load` and the stage parts, never by parsing stats.json themselves.
"""

import base64
import html
import io

import fsspec
import pandas as pd
import pyarrow.parquet as pq
from matplotlib.figure import Figure

from curation import stats
from curation.io import read_json, read_parquet
from filters import STAGES


def _parts(run: str, folder: str, columns: list[str]) -> pd.DataFrame:
    """The given columns of every part under run/folder (those that have them)."""
    fs, root = fsspec.core.url_to_fs(run)
    frames = []
    for path in sorted(fs.glob(f"{root.rstrip('/')}/{folder}/part-*.parquet")):
        with fs.open(path, "rb") as handle:
            part = pq.ParquetFile(handle)
            if all(c in part.schema_arrow.names for c in columns):
                frames.append(part.read(columns=columns).to_pandas())
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def _stage_dirs(run: str) -> list[str]:
    return list(stats.funnel(stats.load(run)).index)


def _adds(spec: dict) -> dict:
    """The columns a recipe's stage adds (some name theirs in a parameter); its params are not checked again here,
    so a run is reported after its models moved."""
    stage_class = STAGES[spec["stage"]]
    return stage_class(stage_class.Params.model_construct(**spec.get("params", {}))).adds


def _stage_with(run: str, column: str) -> tuple[str, str] | None:
    """The stage that adds `column`, and the first stage from it on whose kept documents were written: the same one
    in a run with --materialize-all, else the last stage of its fused segment."""
    fs, root = fsspec.core.url_to_fs(run)
    stages = read_json(fs, f"{root.rstrip('/')}/manifest.json")["recipe"]["stages"]
    stage_dirs = _stage_dirs(run)
    adding = next((i + 1 for i, spec in enumerate(stages) if column in _adds(spec)), None)
    if adding is None:
        return None
    for written in stage_dirs[adding:]:
        if fs.glob(f"{root.rstrip('/')}/{written}/part-*.parquet"):
            return stage_dirs[adding], written
    return None


def funnel_table(run: str) -> pd.DataFrame:
    """Documents and bytes after each stage (and tokens of the tokenized output, when there is one)."""
    table = stats.funnel(stats.load(run))[["shards", "docs_in", "docs_out", "bytes_in", "bytes_out", "seconds"]].copy()
    table["kept"] = (table.docs_out / table.docs_in.where(table.docs_in > 0)).round(4)
    fs, root = fsspec.core.url_to_fs(run)
    tokens = f"{root.rstrip('/')}/tokens/stats.json"
    if fs.exists(tokens):
        total = sum(s["tokens"] for s in read_json(fs, tokens)["sources"].values())
        table["tokens_out"] = pd.NA
        table.loc[table.index[-1], "tokens_out"] = total
    return table


def funnel_figure(run: str):
    table = funnel_table(run)
    figure = Figure(figsize=(12, 4))
    docs, size = figure.subplots(1, 2)
    docs.bar(table.index, table.docs_out, color="tab:blue")
    docs.set_title("documents after each stage")
    size.bar(table.index, table.bytes_out / 1e6, color="tab:orange")
    size.set_title("MB of text after each stage")
    for axis in (docs, size):
        axis.tick_params(axis="x", rotation=45)
    figure.tight_layout()
    return figure


def removal_reasons(run: str) -> pd.DataFrame:
    """Stage x reason: documents removed."""
    totals = stats.funnel(stats.load(run))
    reasons = totals[[c for c in totals.columns if c.startswith("dropped_")]]
    reasons.columns = [c.removeprefix("dropped_") for c in reasons.columns]
    return reasons.loc[:, reasons.sum() > 0]


def removal_figure(run: str):
    reasons = removal_reasons(run)
    stacked = reasons.stack()
    stacked = stacked[stacked > 0].sort_values()
    figure = Figure(figsize=(10, max(3, 0.25 * len(stacked))))
    axis = figure.subplots()
    axis.barh([f"{stage}: {reason}" for stage, reason in stacked.index], stacked.values, color="tab:red")
    axis.set_title("documents removed, by stage and reason")
    figure.tight_layout()
    return figure


def _kept_and_removed(run: str, column: str) -> tuple[str, pd.Series, pd.Series] | None:
    """The stage that adds `column` (named for a figure's title), and the column over the documents it removed
    (--keep-removed) and those it kept, as written: after later stages of its fused segment too, which the title
    says."""
    found = _stage_with(run, column)
    if found is None:
        return None
    stage, written = found
    title = stage if written == stage else f"{stage}; kept as written after {written}"
    return title, _parts(run, written, [column])[column], _parts(run, f"removed/{stage}", [column])[column]


def language_figure(run: str):
    found = _kept_and_removed(run, "language")
    if found is None:
        return None
    stage, kept, removed = found
    frame = pd.DataFrame({"kept": kept.value_counts(), "removed (with --keep-removed)": removed.value_counts()})
    frame = frame.fillna(0).sort_values("kept", ascending=False).head(25)
    figure = Figure(figsize=(10, 4))
    axis = figure.subplots()
    frame.plot.bar(ax=axis, stacked=True)
    axis.set_title(f"language ({stage})")
    figure.tight_layout()
    return figure


def quality_figure(run: str):
    found = _kept_and_removed(run, "quality_score")
    if found is None:
        return None
    stage, kept, removed = found
    scores = pd.concat([kept, removed])
    fs, root = fsspec.core.url_to_fs(run)
    recipe = read_json(fs, f"{root.rstrip('/')}/manifest.json")["recipe"]
    threshold = next((s["params"].get("threshold") for s in recipe["stages"] if s["stage"] == "quality"), None)
    figure = Figure(figsize=(8, 4))
    axis = figure.subplots()
    axis.hist(scores.dropna(), bins=40, color="tab:green")
    if threshold is not None:
        axis.axvline(threshold, color="black", linestyle="--", label=f"threshold {threshold}")
        axis.legend()
    axis.set_title(f"quality_score ({stage})")
    figure.tight_layout()
    return figure


MODEL_STAGES = ("model_score", "perplexity", "score_ensemble")


def _model_columns(run: str) -> list[tuple[str, dict]]:
    """(score column, stage spec) of every model-based scorer of the run's recipe, in recipe order."""
    fs, root = fsspec.core.url_to_fs(run)
    stages = read_json(fs, f"{root.rstrip('/')}/manifest.json")["recipe"]["stages"]
    return [(next(iter(_adds(spec))), spec) for spec in stages if spec["stage"] in MODEL_STAGES]


def model_score_figure(run: str):
    """One histogram per model score (a classifier's, bits per byte, an ensemble), over kept and removed documents."""
    found = [(column, _kept_and_removed(run, column)) for column, _ in _model_columns(run)]
    found = [(column, parts) for column, parts in found if parts is not None]
    if not found:
        return None
    figure = Figure(figsize=(5 * len(found), 3.5))
    for axis, (column, (stage, kept, removed)) in zip(figure.subplots(1, len(found), squeeze=False)[0], found):
        axis.hist([kept.dropna(), removed.dropna()], bins=40, stacked=True, label=["kept", "removed"],
                  color=["tab:green", "tab:red"])  # fmt: skip
        axis.set_title(f"{column} ({stage})", fontsize=9)
        axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def perplexity_buckets(run: str, per_bucket: int = 3, chars: int = 160, seed: int = 0) -> pd.DataFrame | None:
    """Which pages each perplexity bucket holds: its documents, median bits per byte and a few of its pages (kept or,
    with --keep-removed, removed)."""
    rows = []
    for column, spec in _model_columns(run):
        bucket = spec.get("params", {}).get("bucket_column", "perplexity_bucket")
        found = _stage_with(run, column) if spec["stage"] == "perplexity" and spec.get("params", {}).get("cutoffs") else None
        if found is None:
            continue
        stage, written = found
        wanted = ["url", "text", column, bucket]
        pages = pd.concat([_parts(run, written, wanted), _parts(run, f"removed/{stage}", wanted)], ignore_index=True)
        for name, group in pages.groupby(bucket):
            for _, page in group.sample(min(per_bucket, len(group)), random_state=seed).iterrows():
                rows.append({"bucket": name, "documents": len(group), f"median {column}": round(group[column].median(), 3),
                             "page": page.url, "bits per byte": round(page[column], 3), "text": _snippet(page.text, chars)})  # fmt: skip
    return pd.DataFrame(rows) if rows else None


def _counters(run: str, prefix: str) -> pd.Series:
    totals = stats.funnel(stats.load(run))
    columns = [c for c in totals.columns if c.startswith(prefix)]
    return totals[columns].sum().rename(lambda c: c.removeprefix(prefix)) if columns else pd.Series(dtype="int64")


def pii_figure(run: str):
    spans = _counters(run, "pii_spans.")
    if spans.empty:
        return None
    figure = Figure(figsize=(8, 3.5))
    axis = figure.subplots()
    spans.sort_values().plot.barh(ax=axis, color="tab:purple")
    axis.set_title("PII spans replaced, by entity")
    figure.tight_layout()
    return figure


def duplicates_figure(run: str):
    frame = stats.load(run)
    columns = [c for c in frame.columns if c.startswith("cluster_sizes.")]
    if not columns:
        return None
    sizes = frame.groupby("stage")[columns].sum()
    sizes.columns = [c.removeprefix("cluster_sizes.") for c in columns]
    sizes = sizes.loc[sizes.sum(axis=1) > 0, sorted(sizes.columns, key=lambda c: int(c.split("-")[0]))]
    figure = Figure(figsize=(8, 3.5))
    axis = figure.subplots()
    sizes.T.plot.bar(ax=axis)
    axis.set_title("duplicate clusters by size (documents per cluster)")
    axis.set_yscale("log")
    figure.tight_layout()
    return figure


def decontamination_hits(run: str) -> pd.DataFrame | None:
    fs, root = fsspec.core.url_to_fs(run)
    path = f"{root.rstrip('/')}/decontamination.parquet"
    return read_parquet(fs, path).to_pandas() if fs.exists(path) else None


def decontamination_figure(run: str):
    hits = decontamination_hits(run)
    if hits is None:
        return None
    figure = Figure(figsize=(8, 3.5))
    axis = figure.subplots()
    if hits.empty:
        axis.text(0.5, 0.5, "no document shares an n-gram with a benchmark item", ha="center", va="center")
        axis.set_axis_off()
    else:
        per = hits.groupby("benchmark").agg(documents=("id", "nunique"), items=("item_id", "nunique"))
        per.plot.bar(ax=axis)
    axis.set_title("decontamination: documents hit and items matched, per benchmark")
    figure.tight_layout()
    return figure


def _snippet(text, chars: int) -> str:
    return text[:chars] if isinstance(text, str) else "(no text: removed before extraction)"


def removed_samples(run: str, per_reason: int = 2, chars: int = 300, seed: int = 0) -> pd.DataFrame | None:
    """Random removed documents per stage and reason (needs --keep-removed), each beside a random kept one."""
    fs, root = fsspec.core.url_to_fs(run)
    if not fs.exists(f"{root.rstrip('/')}/removed"):
        return None
    rows = []
    for stage in _stage_dirs(run):
        removed = _parts(run, f"removed/{stage}", ["id", "url", "text", "drop_reason"])
        kept = _parts(run, stage, ["id", "text"])
        for reason, group in removed.groupby("drop_reason"):
            for _, doc in group.sample(min(per_reason, len(group)), random_state=seed).iterrows():
                other = kept.sample(1, random_state=seed).iloc[0] if len(kept) else None
                rows.append({
                    "stage": stage, "reason": reason, "url": doc.url, "removed text": _snippet(doc.text, chars),
                    "a kept text": "" if other is None else _snippet(other.text, chars),
                })  # fmt: skip
    return pd.DataFrame(rows)


SECTIONS = [
    ("Funnel", funnel_figure, funnel_table),
    ("Removal reasons", removal_figure, removal_reasons),
    ("Languages", language_figure, None),
    ("Quality scores", quality_figure, None),
    ("Model scores and perplexity buckets", model_score_figure, perplexity_buckets),
    ("PII entities", pii_figure, None),
    ("Duplicate clusters", duplicates_figure, None),
    ("Decontamination", decontamination_figure, None),
    ("Removed documents", None, removed_samples),
]


def png_base64(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    return base64.b64encode(buffer.getvalue()).decode()


def _sections_html(folder: str, sections) -> list[str]:
    parts = []
    for title, make_figure, make_table in sections:
        parts.append(f"<h2>{html.escape(title)}</h2>")
        figure = make_figure(folder) if make_figure else None
        table = make_table(folder) if make_table else None
        if figure is None and table is None:
            parts.append("<p>not in this run</p>")
        if figure is not None:
            parts.append(f"<img src='data:image/png;base64,{png_base64(figure)}'>")
        if table is not None:
            parts.append(table.to_html(max_rows=50))
    return parts


def render_html(run: str, also: list[tuple[str, str, list]] = ()) -> str:
    """One static page: every section of the curation run, then those of `also`'s (heading, folder, sections), e.g.
    a training run's, which `experiments` adds (curation knows nothing of training)."""
    parts = [f"<html><head><meta charset='utf-8'><title>Report: {html.escape(run)}</title></head><body>",
             f"<h1>Curation run {html.escape(run)}</h1>", *_sections_html(run, SECTIONS)]  # fmt: skip
    for heading, folder, sections in also:
        parts += [f"<h1>{html.escape(heading)}</h1>", *_sections_html(folder, sections)]
    parts.append("</body></html>")
    return "\n".join(parts)
