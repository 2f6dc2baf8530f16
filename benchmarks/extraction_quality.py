"""Extraction quality and cost: every backend of the extract stage against trafilatura's own extract() and
datatrove's Trafilatura step, on the development sets with reference text, and their agreement on real WARC pages.

    python benchmarks/extraction_quality.py [--repeat 2] [--core 0] [--json results.json]

Development sets (../shared/corpus/html, curation/extraction_sets.py): the article-extraction-benchmark's 181 pages
(reference: ground-truth.json's article body) and Mozilla Readability's 130 test pages (reference: expected.html's
text), scored as the article-extraction-benchmark scores (4-word shingles, precision and recall averaged over pages,
F1 of the two). Each set is printed for its held-out split (pages resiliparse_blocks' classifier was not trained on:
`curate extract train-blocks` uses the rest) and for all its pages. CPU: milliseconds per page in one process pinned
to one core, each page's best of --repeat, backends taking turns page by page; datatrove's step in one pass in page
order, as a datatrove task runs it (its deduplicate remembers earlier pages). Ratio: CPU against the resiliparse
backend's in the same run (the goal: resiliparse_blocks at <= 2x with trafilatura's F1 within 0.005).

Real pages: the WARC files in ../shared/data/warc and ../shared/corpus/warc, read by the project's WarcReader; per
backend, the share of pages whose kept/dropped decision after fineweb-snapshot's per-page filters (langid, badwords,
heuristics) differs from the default backend's (trafilatura).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.extract_settings import after_page_filters, kept_text, read_pages  # noqa: E402
from curation.extraction_sets import SET_NAMES, load_set, page_counts, score  # noqa: E402
from filters.extract import extract_page  # noqa: E402
from filters.extract_blocks import MODEL_FILE, load_block_model  # noqa: E402

SHARED = ROOT.parent / "shared"
DEFAULT = "ours: trafilatura (default)"
BASELINE = "ours: resiliparse"


def backends() -> dict:
    """Name -> function(html) -> (text, fell back to trafilatura)."""
    import trafilatura
    from datatrove.pipeline.extractors import Trafilatura

    datatrove_step = Trafilatura()
    return {
        DEFAULT: lambda html: extract_page("trafilatura", html),
        BASELINE: lambda html: extract_page("resiliparse", html),
        "ours: resiliparse_blocks": lambda html: extract_page("resiliparse_blocks", html),
        "ours: resiliparse_blocks, blocks_fallback_unsure 0.3": lambda html: extract_page("resiliparse_blocks", html,
                                                                                          fallback_unsure=0.3),
        "trafilatura extract() defaults (anchor)": lambda html: (trafilatura.extract(html), False),
        "datatrove 0.10.1 Trafilatura step (anchor)": lambda html: (datatrove_step.extract(html), False),
    }


def run_backends(pages: list[str], extractors: dict, repeat: int) -> tuple[dict, dict, dict]:
    """Per backend: CPU seconds per page (best of `repeat`), texts and fallbacks of the first pass. datatrove's step
    runs once, in page order."""
    for extract in extractors.values():
        extract("<p>warm-up</p>")
    names = [name for name in extractors if "datatrove" not in name]
    seconds = {name: [float("inf")] * len(pages) for name in extractors}
    texts = {name: [None] * len(pages) for name in extractors}
    fallbacks = dict.fromkeys(extractors, 0)
    for attempt in range(repeat):
        for index, html in enumerate(pages):
            turn = index % len(names)
            for name in names[turn:] + names[:turn]:
                started = time.process_time()
                try:
                    text, fell_back = extractors[name](html)
                except Exception:  # counted as an empty extraction, as the stage drops the page
                    text, fell_back = None, False
                seconds[name][index] = min(seconds[name][index], time.process_time() - started)
                if attempt == 0:
                    texts[name][index], fallbacks[name] = text, fallbacks[name] + fell_back
    for name in set(extractors) - set(names):
        for index, html in enumerate(pages):
            started = time.process_time()
            try:
                texts[name][index] = extractors[name](html)[0]
            except Exception:
                texts[name][index] = None
            seconds[name][index] = time.process_time() - started
    return seconds, texts, fallbacks


def quality_table(set_name: str, repeat: int) -> list[dict]:
    pages = load_set(set_name)
    seen = set(load_block_model().trained_on) & {page.name for page in pages if page.split == "heldout"}
    if seen:
        raise SystemExit(f"{MODEL_FILE}: trained on {len(seen)} of {set_name}'s held-out pages ({sorted(seen)[:3]}...); "
                         "train it again with `curate extract train-blocks`")  # fmt: skip
    seconds, texts, fallbacks = run_backends([page.html for page in pages], backends(), repeat)
    rows = []
    for split in ("heldout", "all"):
        chosen = [i for i, page in enumerate(pages) if split == "all" or page.split == split]
        print(f"\n{set_name}, {'held-out split' if split == 'heldout' else 'all pages'}: {len(chosen)} pages")
        print("| extractor | F1 | precision | recall | CPU ms/page | x resiliparse | to trafilatura |\n|---|---|---|---|---|---|---|")
        baseline = sum(seconds[BASELINE][i] for i in chosen)
        for name in texts:
            figures = score([page_counts(pages[i].reference, texts[name][i]) for i in chosen])
            cpu = sum(seconds[name][i] for i in chosen)
            fell = fallbacks[name] if split == "all" else None
            row = {"set": set_name, "split": split, "extractor": name, **figures, "ms_per_page": 1000 * cpu / len(chosen),
                   "ratio_to_resiliparse": cpu / baseline, "fallbacks_all_pages": fell}  # fmt: skip
            rows.append(row)
            share = f"{fell} ({fell / len(pages):.0%})" if fell and split == "all" else ""
            print(f"| {name} | {figures['f1']:.3f} | {figures['precision']:.3f} | {figures['recall']:.3f} | "
                  f"{row['ms_per_page']:.1f} | {row['ratio_to_resiliparse']:.2f} | {share} |")  # fmt: skip
    return rows


def warc_agreement(repeat: int) -> list[dict]:
    paths = sorted(str(p) for folder in (SHARED / "data" / "warc", SHARED / "corpus" / "warc")
                   for p in folder.rglob("*.warc*") if not p.name.endswith((".wat.gz", ".wet.gz", ".cdx")))  # fmt: skip
    _, pages = read_pages(paths)
    seconds, texts, _ = run_backends(pages, backends(), repeat)
    kept = {name: [kept_text(t) for t in out] for name, out in texts.items()}
    passing = after_page_filters(list(kept.values()))
    decisions = {name: [t is not None and t in passing for t in out] for name, out in kept.items()}
    print(f"\nreal WARC pages: {len(pages)} HTML pages from {len(paths)} files; decision = kept after extract and "
          "fineweb-snapshot's per-page filters")
    print("| extractor | pages kept | decision differs from the default | CPU ms/page |\n|---|---|---|---|")
    rows = []
    for name, decided in decisions.items():
        differs = sum(a != b for a, b in zip(decided, decisions[DEFAULT]))
        row = {"extractor": name, "kept": sum(decided), "differs": differs, "share_differs": differs / len(pages),
               "ms_per_page": 1000 * sum(seconds[name]) / len(pages)}  # fmt: skip
        rows.append(row)
        print(f"| {name} | {row['kept']} | {differs} ({row['share_differs']:.1%}) | {row['ms_per_page']:.1f} |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--core", type=int, default=0, help="the CPU this process is pinned to")
    parser.add_argument("--json", help="write every row here")
    args = parser.parse_args()
    try:
        for name in SET_NAMES:
            load_set(name)
    except FileNotFoundError as error:
        raise SystemExit(f"extraction_quality: {error}") from None
    os.sched_setaffinity(0, {args.core})
    results = {name: quality_table(name, args.repeat) for name in SET_NAMES}
    results["real WARC pages"] = warc_agreement(args.repeat)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
