"""Trafilatura's own settings against today's extract stage and datatrove's Trafilatura step, on the same pages.

    python benchmarks/extract_settings.py [--real WARC ...] [--generated WARC] [--repeat 3]
        [--anchor-python .venv-anchor/bin/python] [--json results.json]

Input: the real Common Crawl / wget WARC slices in ../shared/data/warc/ (they decide) and a generated WARC
(../shared/bench/make_bench_warc.py, 2,000 pages, seed 0; made here when --generated is not given), read with the
project's WarcReader and decoded with the extract stage's decode_html, so every setting sees the same HTML strings.
Baseline: today's setting (filters/extract.py: favor_precision, no comments, deduplicate=False) in the same run.
Reference: datatrove 0.10.1's Trafilatura step (`Trafilatura().extract`, its defaults: favour_precision,
deduplicate=True, with the trafilatura version datatrove pins) under the anchor venv, pages in file order in one
process, as a datatrove task runs them.
Per setting, one process pinned to one core: CPU seconds (each page's best of --repeat, settings taking turns page by
page, so load on the machine spreads over all of them; datatrove's one pass, as its deduplicate remembers pages) and
the ratio to today, pages kept (text of >= 1 char after strip, the stage's minimum), total characters, kept/dropped agreement with today and with datatrove, mean Jaccard of word sets over pages
both keep, pages whose text is identical to today's, and the markup lines in the kept text (tables `|`, list items
`- `, headings `#`, links `](`); then the same for the texts that pass fineweb-snapshot's per-page filters after extract
(langid English >= 0.65, badwords, heuristics): pages passing, passing/not agreeing with today, passing pages whose
text is today's, passing/not agreeing with datatrove.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import trafilatura
from trafilatura.core import bare_extraction

from curation.recipe import load_recipe
from curation.sources.warc import WarcReader
from filters.extract import ExtractParams, HtmlExtractor, decode_html, extract_text

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
TODAY = {"favor_precision": True, "include_comments": False, "deduplicate": False}  # extract_text's, for the variants
MIN_CHARS = max(1, ExtractParams().min_text_chars)

DATATROVE_SCRIPT = """
import json, sys, time
import trafilatura
from datatrove.pipeline.extractors import Trafilatura
step = Trafilatura()
pages = [json.loads(line) for line in open(sys.argv[1])]
step.extract("<p>warm-up</p>")
start = time.process_time()
texts = []
for html in pages:
    try:
        texts.append(step.extract(html))
    except Exception:
        texts.append(None)
seconds = time.process_time() - start
json.dump({"seconds": seconds, "texts": texts, "trafilatura": trafilatura.__version__}, open(sys.argv[2], "w"))
"""


def _extract(**options):
    return lambda html: trafilatura.extract(html, **{**TODAY, **options})


def _bare(html: str) -> str | None:
    document = bare_extraction(html, **TODAY)
    return document.text if document is not None else None


def _through_stage():
    """Today's call inside the stage's per-page limit (SIGALRM on the main thread, timeout_s=5)."""
    stage = HtmlExtractor(ExtractParams(timeout_s=5))
    stage.setup()
    return stage._extract_limited


def _fresh_cache_per_page(html: str) -> str | None:
    """trafilatura's deduplicate with an LRUCache of its own per page: repeats inside a page only, no memory across."""
    from trafilatura.deduplication import LRUCache

    return trafilatura.extract(html, **{**TODAY, "deduplicate": LRUCache(maxsize=4096)})


def candidates() -> dict[str, object]:
    """Name -> function(html) -> text or None. Every one starts from today's options and changes what its name says."""
    return {
        "today": lambda html: extract_text("trafilatura", html),
        "today, stage timeout 5 s": _through_stage(),
        "bare_extraction": _bare,
        "fast": lambda html: extract_text("trafilatura", html, fast=True),  # the stage's trafilatura_fast
        "include_tables=False": _extract(include_tables=False),
        "fast, include_tables=False": _extract(fast=True, include_tables=False),
        "include_formatting": _extract(include_formatting=True),
        "include_links": _extract(include_links=True),
        "include_images": _extract(include_images=True),
        "output_format=markdown": _extract(output_format="markdown"),
        "balanced (no favor_precision)": _extract(favor_precision=False),
        "favor_recall": _extract(favor_precision=False, favor_recall=True),
        "deduplicate=True (datatrove's)": _extract(deduplicate=True),
        "deduplicate per page": _fresh_cache_per_page,
    }


def read_pages(paths: list[str]) -> tuple[list[str], list[str]]:
    """URLs and HTML strings as the extract stage sees them: read by WarcReader, too-large and undecodable pages left
    out."""
    limit, urls, pages = ExtractParams().max_html_bytes, [], []
    for path in paths:
        table = WarcReader("bench").read(path).table
        for url, payload, charset in zip(*(table[c].to_pylist() for c in ("url", "html", "charset"))):
            if payload is not None and len(payload) <= limit:
                html = decode_html(payload, charset)
                if html is not None:
                    urls.append(url)
                    pages.append(html)
    return urls, pages


def kept_text(text: str | None) -> str | None:
    text = (text or "").strip()
    return text if len(text) >= MIN_CHARS else None


def run_datatrove(pages: list[str], anchor_python: str, workdir: Path) -> dict:
    pages_file, out_file = workdir / "pages.jsonl", workdir / "datatrove.json"
    with open(pages_file, "w") as f:
        f.writelines(json.dumps(html) + "\n" for html in pages)
    subprocess.run([anchor_python, "-c", DATATROVE_SCRIPT, str(pages_file), str(out_file)], check=True)
    result = json.loads(out_file.read_text())
    result["texts"] = [kept_text(t) for t in result["texts"]]
    return result


def time_settings(pages: list[str], settings: dict, repeat: int) -> tuple[dict, dict]:
    """CPU seconds per setting, each page's best of `repeat` summed, and the texts of the first pass. Settings take
    turns page by page, in an order rotated per page, so a busy spell on the shared machine lands on all of them."""
    for extract in settings.values():
        extract("<p>warm-up</p>")
    names = list(settings)
    best = {name: [float("inf")] * len(pages) for name in settings}
    texts: dict[str, list] = {name: [] for name in settings}
    for attempt in range(repeat):
        for index, html in enumerate(pages):
            turn = index % len(names)  # the page's first call runs with a colder cache: every setting takes that turn
            for name in names[turn:] + names[:turn]:
                extract = settings[name]
                start = time.process_time()
                text = extract(html)
                best[name][index] = min(best[name][index], time.process_time() - start)
                if attempt == 0:
                    texts[name].append(kept_text(text))
    return {name: sum(per_page) for name, per_page in best.items()}, texts


def words(text: str) -> set[str]:
    return set(text.split())


def jaccard(a: str, b: str) -> float:
    wa, wb = words(a), words(b)
    return len(wa & wb) / len(wa | wb) if wa or wb else 1.0


def agreement(texts: list, reference: list) -> tuple[float, float, int]:
    """Share of pages whose kept/dropped agrees; mean word-set Jaccard over pages both keep; pages kept by both."""
    same = sum((a is None) == (b is None) for a, b in zip(texts, reference)) / len(texts)
    both = [jaccard(a, b) for a, b in zip(texts, reference) if a is not None and b is not None]
    return same, (sum(both) / len(both) if both else float("nan")), len(both)


MARKUP = {"table": re.compile(r"^\|| \| "), "list": re.compile(r"^\s*[-*] "), "heading": re.compile(r"^#+ "),
          "link": re.compile(r"\]\(")}  # fmt: skip


def markup_lines(texts: list) -> dict[str, int]:
    counts = dict.fromkeys(MARKUP, 0)
    for text in texts:
        for line in (text or "").splitlines():
            for kind, pattern in MARKUP.items():
                counts[kind] += bool(pattern.search(line))
    return counts


def after_page_filters(text_lists: list[list]) -> set[str]:
    """The texts that pass fineweb-snapshot's per-page filters after extract (langid, badwords, heuristics): what a
    changed extraction changes in the curated output, before dedup."""
    recipe = load_recipe("fineweb-snapshot")
    wanted = ("langid", "badwords", "heuristics")
    stages = [recipe.build(i) for i, spec in enumerate(recipe.stages) if spec.stage in wanted]
    unique = sorted({text for texts in text_lists for text in texts if text})
    table = pa.table({"id": [str(i) for i in range(len(unique))], "text": unique})
    for stage in stages:
        table = stage.process(table).kept
    return {unique[int(i)] for i in table["id"].to_pylist()}


def report(title: str, pages: list[str], seconds: dict, texts: dict, datatrove: dict) -> list[dict]:
    reference, today = datatrove["texts"], texts["today"]
    print(f"\n{title}: {len(pages)} pages, {sum(map(len, pages)) / 1e6:.1f} M chars of HTML")
    header = ("setting", "s", "x today", "kept", "chars", "kept= today", "J today", "same text", "kept= dt", "J dt",
              "table/list/head/link lines", "pass filters", "pass= today", "same text", "pass= dt")  # fmt: skip
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    rows = []
    all_rows = [(name, seconds[name], texts[name]) for name in texts]
    all_rows.append((f"datatrove 0.10.1 Trafilatura (trafilatura {datatrove['trafilatura']}, anchor)",
                     datatrove["seconds"], reference))  # fmt: skip
    passing = after_page_filters([out for _, _, out in all_rows])
    filtered = {name: [t if t in passing else None for t in out] for name, _, out in all_rows}
    filtered_today, filtered_reference = filtered["today"], filtered[all_rows[-1][0]]
    for name, secs, out in all_rows:
        kept_same, j_today, _ = agreement(out, today)
        dt_same, j_dt, _ = agreement(out, reference)
        identical = sum(a == b for a, b in zip(out, today) if a is not None)
        kept = sum(t is not None for t in out)
        chars = sum(len(t) for t in out if t)
        markup = markup_lines(out)
        passed = sum(t is not None for t in filtered[name])
        passed_today = agreement(filtered[name], filtered_today)[0]
        passed_reference = agreement(filtered[name], filtered_reference)[0]
        passed_identical = sum(a == b for a, b in zip(filtered[name], filtered_today) if a is not None)
        row = {"setting": name, "seconds": secs, "ratio": secs / seconds["today"], "kept": kept, "chars": chars,
               "kept_agrees_today": kept_same, "jaccard_today": j_today, "identical_today": identical,
               "kept_agrees_datatrove": dt_same, "jaccard_datatrove": j_dt, "markup": markup,
               "passed_filters": passed, "passed_agrees_today": passed_today,
               "passed_agrees_datatrove": passed_reference, "passed_identical_today": passed_identical}  # fmt: skip
        rows.append(row)
        print(f"| {name} | {secs:.2f} | {row['ratio']:.2f} | {kept} | {chars:,} | {kept_same:.3f} | {j_today:.3f} | "
              f"{identical} | {dt_same:.3f} | {j_dt:.3f} | {'/'.join(str(v) for v in markup.values())} | "
              f"{passed} | {passed_today:.3f} | {passed_identical} | {passed_reference:.3f} |")  # fmt: skip
    return rows


def show_differences(setting: str, urls: list[str], texts: dict, reference: list) -> None:
    """Pages where `setting` keeps or drops otherwise than today: what today and datatrove kept of them."""
    print(f"\npages where {setting!r} keeps/drops otherwise than today (chars: today / setting / datatrove):")
    for url, today, other, datatrove in zip(urls, texts["today"], texts[setting], reference):
        if (today is None) != (other is None):
            print(f"  {url}: {len(today or '')} / {len(other or '')} / {len(datatrove or '')}: "
                  f"{(today or other)[:100]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    real = sorted(str(p) for p in (SHARED / "data" / "warc").glob("*.warc.gz"))
    parser.add_argument("--real", nargs="*", default=real, help="real WARC files; default: ../shared/data/warc/")
    parser.add_argument("--generated", help="a generated WARC; default: make 2,000 pages (seed 0) in a temp folder")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--core", type=int, default=0, help="the CPU this process is pinned to")
    parser.add_argument("--anchor-python", default=str(ROOT / ".venv-anchor" / "bin" / "python"))
    parser.add_argument("--diff", metavar="SETTING", help="the pages where SETTING keeps/drops otherwise than today")
    parser.add_argument("--json")
    args = parser.parse_args()
    if not Path(args.anchor_python).is_file():
        raise SystemExit(f"no anchor Python at {args.anchor_python}: python -m venv .venv-anchor && "
                         ".venv-anchor/bin/pip install 'datatrove[io,processing]==0.10.1' lxml_html_clean")  # fmt: skip
    os.sched_setaffinity(0, {args.core})
    print(f"trafilatura {trafilatura.__version__}, today = filters/extract.py's extract_text = extract(html, {TODAY}), "
          f"one core (cpu {args.core}), "
          f"CPU s, per page best of {args.repeat}; kept = >= {MIN_CHARS} char after strip; J = mean Jaccard of word "
          "sets over pages both keep; dt = datatrove")  # fmt: skip
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        generated = args.generated
        if not generated:
            generated = str(workdir / "generated.warc.gz")
            subprocess.run([args.anchor_python, str(SHARED / "bench" / "make_bench_warc.py"),
                            str(SHARED / "data" / "langid" / "sentences"), generated, "--pages", "2000", "--seed", "0",
                            "--files", "1"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        for title, paths in (("real WARC slices", args.real), ("generated pages", [generated])):
            urls, pages = read_pages(paths)
            datatrove = run_datatrove(pages, args.anchor_python, workdir)
            seconds, texts = time_settings(pages, candidates(), args.repeat)
            results[title] = report(title, pages, seconds, texts, datatrove)
            if args.diff:
                show_differences(args.diff, urls, texts, datatrove["texts"])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.exit(main())
