"""fineweb-snapshot on growing corpora of Common Crawl-shaped WARC files: does throughput and memory stay flat?

    python benchmarks/scale_soak.py [--sizes 25000,100000,250000] [--pages-per-file 6250] [--workers 2]
        [--backend resiliparse] [--kill-at 0.6] [--sentences ../shared/data/langid/sentences] [--keep WORKDIR]
        [--json results.json]

Input: generated once, for the largest size, into WORKDIR/warc; each smaller size is the first of its files. Each
page is the three records Common Crawl writes (request, response, metadata; a warcinfo record opens each file), its
HTML the size of a Common Crawl page (60 KB on average: site boilerplate, inline scripts and styles around an article
of 5-40 real sentences; about 22 KB per page compressed with its other records, CC-MAIN-2019-09's 22.7 KB), 60% English
and the rest spread over the other languages of `--sentences` (without it: English prose of Python's documentation and
Faker's words in six languages), with 10% exact and 10% near duplicates of earlier pages (anywhere earlier, across
files) and 5% keyword spam, the rates of ../shared/bench/make_bench_warc.py. Common Crawl's files hold ~45,000 pages;
the default 6,250 keeps 4 files at the smallest size, so 2 workers stay busy there (`--pages-per-file 45000` for the
real shape).

Each size runs fineweb-snapshot (FineWeb's stages and MinHash, no model-based quality, PII scrub included) alone, as a
subprocess, Ray start and stop included; printed per size: wall, pages/s, peak RSS of the driver, of each worker and of
Ray's own processes (each role's own peak over the run, the dedup passes included), the dedup passes' seconds,
the object store's peak use (/dev/shm), the passes' largest task's RSS, the manifest's size, disk written per stage,
and what Ray reported spilling. Then the run is
repeated at the largest size with a SIGKILL to its whole process group once the manifest records `--kill-at` of its
(stage, file) entries, resumed, and its output compared with the uninterrupted run's by the digests of every part.
Baseline: the smallest size (ratios per row); the goal is pages/s and per-worker RSS within 10% of it.
"""

import argparse
import base64
import gzip
import hashlib
import html
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.curate_vs_datatrove import DRIVER, PeakByRole  # noqa: E402

SHARED_SENTENCES = ROOT.parent / "shared" / "data" / "langid" / "sentences"
ENGLISH_SHARE, EXACT_SHARE, NEAR_SHARE, SPAM_SHARE, NEAR_REPLACED = 0.60, 0.10, 0.10, 0.05, 0.10
SITES = 60
HTML_BYTES = 60_000  # a Common Crawl page's HTML, on average (docs/scaling.md)
DUPLICATE_WINDOW = 50_000  # a duplicate copies one of this many pages before it
FALLBACK_LOCALES = {"de": "de_DE", "fr": "fr_FR", "es": "es_ES", "ru": "ru_RU", "zh": "zh_CN", "ja": "ja_JP"}
JS_WORDS = ("function", "var", "return", "this", "document", "window", "push", "length", "null", "if", "else", "for",
            "config", "track", "event", "callback", "element", "style", "data", "init", "render", "ajax", "module")  # fmt: skip


def sentence_pool(folder: Path | None) -> dict[str, list[str]]:
    """Sentences by language: `folder/<lang>.txt` (one per line), or a built-in pool from what every machine has."""
    if folder is not None and folder.is_dir() and any(folder.glob("*.txt")):
        return {path.stem: [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
                for path in sorted(folder.glob("*.txt"))}  # fmt: skip
    import pydoc_data.topics
    from faker import Faker

    english = [s.strip() for text in pydoc_data.topics.topics.values() for s in re.split(r"(?<=[.!?])\s+", text)
               if 40 <= len(s.strip()) <= 300 and s.strip()[0].isupper() and "\n" not in s.strip()]  # fmt: skip
    pool = {"en": english[:2000]}
    for language, locale in FALLBACK_LOCALES.items():
        fake = Faker(locale)
        fake.seed_instance(len(pool))
        pool[language] = [fake.sentence(nb_words=12) for _ in range(300)]
    return pool


class SoakPages:
    """Page `index` of a seeded crawl, computed from (seed, index) alone: any process can write any file, and a
    duplicate regenerates the page it copies instead of anyone holding it."""

    def __init__(self, seed: int, pool: dict[str, list[str]]):
        self.seed, self.pool = seed, pool
        self.others = sorted(language for language in pool if language != "en") or ["en"]
        site_rng = random.Random(f"{seed}-sites")
        self.sites = [self._site(site_rng, number) for number in range(SITES)]

    @staticmethod
    def _site(rng: random.Random, number: int) -> dict:
        """A site's boilerplate: navigation, an inline script and style, footer; pages of a site share it."""
        padding = max(2000, int(rng.gauss(HTML_BYTES - 6000, 15000)))
        script, length = [], 0
        while length < padding * 0.7:
            script.append(f"{rng.choice(JS_WORDS)}_{rng.getrandbits(24):x}({rng.choice(JS_WORDS)}, {rng.randint(0, 9999)});")
            length += len(script[-1]) + 1
        style = [f".c{rng.getrandbits(20):x} {{margin:{rng.randint(0, 40)}px;color:#{rng.getrandbits(24):06x}}}"
                 for _ in range(int(padding * 0.3) // 40)]  # fmt: skip
        name = f"site{number}-{rng.getrandbits(32):08x}.example.{rng.choice(['com', 'org', 'net', 'de', 'fr', 'io'])}"
        nav = "".join(f'<li><a href="/{word}">{word.title()}</a></li>' for word in rng.sample(JS_WORDS, 8))
        return {"host": name, "nav": nav, "script": "\n".join(script), "style": "\n".join(style)}

    def _rng(self, index: int, salt: str = "") -> random.Random:
        return random.Random(f"{self.seed}-{index}{salt}")

    def kind(self, index: int) -> str:
        draw = self._rng(index, "kind").random()
        if index == 0 or draw >= EXACT_SHARE + NEAR_SHARE + SPAM_SHARE:
            return "unique"
        return "exact" if draw < EXACT_SHARE else "near" if draw < EXACT_SHARE + NEAR_SHARE else "spam"

    def source(self, index: int) -> int:
        return self._rng(index, "source").randrange(max(0, index - DUPLICATE_WINDOW), index)

    def article(self, index: int) -> tuple[str, list[str]]:
        """(language, sentences) of the page's main text."""
        kind, rng = self.kind(index), self._rng(index, "article")
        if kind == "exact":
            return self.article(self.original(index))
        if kind == "near":
            language, sentences = self.article(self.source(index))
            sentences = list(sentences)
            for position in rng.sample(range(len(sentences)), max(1, round(NEAR_REPLACED * len(sentences)))):
                sentences[position] = rng.choice(self.pool[language])
            return language, sentences
        if kind == "spam":
            words = rng.sample(["cheap", "casino", "bonus", "free", "pills", "loans", "replica", "win", "discount"], 4)
            return "en", [" ".join(rng.choices(words, k=rng.randint(3, 8))) for _ in range(rng.randint(20, 60))]
        language = "en" if rng.random() < ENGLISH_SHARE else rng.choice(self.others)
        sentences = self.pool[language]
        return language, [rng.choice(sentences) for _ in range(rng.randint(5, 40))]

    def original(self, index: int) -> int:
        """The page an exact duplicate copies (through duplicates of duplicates); any other page is its own."""
        while self.kind(index) == "exact":
            index = self.source(index)
        return index

    def payload(self, index: int) -> bytes:
        """The page's HTML: an exact duplicate's is the bytes of the page it copies, served under another URL."""
        index = self.original(index)
        language, sentences = self.article(index)
        site, rng = self.sites[self._rng(index, "site").randrange(SITES)], self._rng(index, "layout")
        paragraphs, start = [], 0
        while start < len(sentences):
            size = rng.randint(2, 5)
            paragraphs.append(" ".join(sentences[start : start + size]))
            start += size
        title = html.escape(sentences[0][:80])
        body = "\n".join(f"<p>{html.escape(paragraph)}</p>" for paragraph in paragraphs)
        return (
            f'<!DOCTYPE html>\n<html lang="{language}"><head><meta charset="utf-8"><title>{title}</title>\n'
            f"<style>\n{site['style']}\n</style></head>\n<body>\n<header><nav><ul>{site['nav']}</ul></nav></header>\n"
            '<div class="cookie-banner">We use cookies to improve your experience. <button>Accept</button></div>\n'
            f"<main><article><h1>{title}</h1>\n{body}\n</article></main>\n"
            f"<footer>&copy; 2024 {site['host']}. <a href=\"/terms\">Terms</a></footer>\n"
            f"<script>\n{site['script']}\n</script>\n</body></html>\n"
        ).encode("utf-8")

    def url(self, index: int) -> str:
        site = self.sites[self._rng(index, "url").randrange(SITES)]
        return f"https://{site['host']}/articles/{index}-{self._rng(index, 'slug').getrandbits(32):08x}.html"


def _record(headers: list[tuple[str, str]], block: bytes) -> bytes:
    head = "WARC/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + f"Content-Length: {len(block)}\r\n\r\n"
    return gzip.compress(head.encode("utf-8") + block + b"\r\n\r\n", compresslevel=6, mtime=0)


def _digest(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


def write_file(path: Path, first: int, count: int, seed: int, pool: dict[str, list[str]]) -> int:
    """Pages [first, first + count) as one gzip-per-record WARC file, written atomically; returns its bytes."""
    pages = SoakPages(seed, pool)
    ids = random.Random(f"{seed}-ids-{first}")
    date = "2024-01-01T00:00:00Z"
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:
        info = f"software: benchmarks/scale_soak.py\r\nisPartOf: soak\r\nseed: {seed}\r\n".encode()
        out.write(_record([("WARC-Type", "warcinfo"), ("WARC-Date", date), ("WARC-Filename", path.name),
                           ("WARC-Record-ID", f"<urn:uuid:{uuid.UUID(int=ids.getrandbits(128))}>"),
                           ("Content-Type", "application/warc-fields")], info))  # fmt: skip
        for index in range(first, first + count):
            url, payload = pages.url(index), pages.payload(index)
            host, target = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
            http = (f"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=UTF-8\r\nContent-Length: {len(payload)}\r\n"
                    "Server: nginx\r\nCache-Control: max-age=600\r\n\r\n").encode("latin-1") + payload  # fmt: skip
            request_id, response_id, metadata_id = (f"<urn:uuid:{uuid.UUID(int=ids.getrandbits(128))}>" for _ in range(3))
            request = (f"GET {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: CCBot/2.0 (https://commoncrawl.org/faq/)\r\n"
                       "Accept: text/html\r\nAccept-Encoding: gzip\r\n\r\n").encode()  # fmt: skip
            metadata = (f"fetchTimeMs: {ids.randint(50, 900)}\r\ncharset-detected: UTF-8\r\n"
                        f'languages-cld2: {{"reliable":true,"languages":[]}}\r\n').encode()  # fmt: skip
            out.write(_record([("WARC-Type", "request"), ("WARC-Date", date), ("WARC-Record-ID", request_id),
                               ("WARC-Target-URI", url), ("Content-Type", "application/http; msgtype=request")], request))
            out.write(_record([("WARC-Type", "response"), ("WARC-Date", date), ("WARC-Record-ID", response_id),
                               ("WARC-Target-URI", url), ("WARC-Concurrent-To", request_id),
                               ("WARC-Payload-Digest", _digest(payload)), ("WARC-Block-Digest", _digest(http)),
                               ("Content-Type", "application/http; msgtype=response")], http))
            out.write(_record([("WARC-Type", "metadata"), ("WARC-Date", date), ("WARC-Record-ID", metadata_id),
                               ("WARC-Target-URI", url), ("WARC-Concurrent-To", response_id),
                               ("Content-Type", "application/warc-fields")], metadata))  # fmt: skip
    tmp.replace(path)
    return path.stat().st_size


def generate(folder: Path, pages: int, pages_per_file: int, seed: int, sentences: Path | None, processes: int = 1) -> list[Path]:
    """soak-NNNNN.warc.gz files holding `pages` pages; files already written for the same settings are kept."""
    folder.mkdir(parents=True, exist_ok=True)
    settings = {"pages_per_file": pages_per_file, "seed": seed, "sentences": str(sentences), "version": 1}
    marker = folder / "soak.json"
    if marker.is_file() and json.loads(marker.read_text()) != settings:
        raise SystemExit(f"{folder} holds a soak written with other settings ({marker}); give another --keep folder")
    marker.write_text(json.dumps(settings))
    pool = sentence_pool(sentences)
    jobs = [(folder / f"soak-{number:05d}.warc.gz", first, min(pages_per_file, pages - first))
            for number, first in enumerate(range(0, pages, pages_per_file))]  # fmt: skip
    todo = [job for job in jobs if not job[0].is_file()]
    with ProcessPoolExecutor(max(1, processes)) as pool_of_writers:
        for future in [pool_of_writers.submit(write_file, path, first, count, seed, pool) for path, first, count in todo]:
            future.result()
    return [path for path, _, _ in jobs]


class RolePeaks(PeakByRole):
    """Each role's own peak RSS over a run (the driver, the largest worker, Ray's own processes together), where
    PeakByRole keeps the roles at the peak of their sum; the same samples of the command's process tree. And the
    object store's peak: /dev/shm's use above what it held when the run started."""

    def __init__(self, pid: int, interval: float = 0.5):
        self.maxima = {"driver": 0, "ray": 0, "worker": 0, "object_store": 0}
        self.shm_before = shm_used()
        super().__init__(pid, interval)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.maxima["object_store"] = max(self.maxima["object_store"], shm_used() - self.shm_before)
            rss, _ = self.sample()
            workers = [value for name, value in rss.items() if name.startswith("worker")]
            for key, value in (("driver", rss.get(DRIVER, 0)), ("worker", max(workers, default=0)),
                               ("ray", sum(rss.values()) - rss.get(DRIVER, 0) - sum(workers))):  # fmt: skip
                self.maxima[key] = max(self.maxima[key], value)

    def peaks(self) -> dict:
        return {f"{key}_mib": round(value / 2**20) for key, value in self.maxima.items()}


def shm_used() -> int:
    """Bytes in use on /dev/shm, where Ray's object store maps its memory on Linux (pages it has touched)."""
    return shutil.disk_usage("/dev/shm").used if os.path.isdir("/dev/shm") else 0


def soak_recipe(path: Path, backend: str) -> Path:
    from curation.recipe import load_recipe

    recipe = load_recipe("fineweb-snapshot").model_dump()
    recipe["stages"] = [stage for stage in recipe["stages"] if stage["stage"] not in ("quality", "model_score")]
    for stage in recipe["stages"]:
        if stage["stage"] == "extract":
            stage["params"]["backend"] = backend
    recipe["name"] = f"soak-{backend}"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def curate_command(files: list[Path], recipe: Path, output: Path, workers: int) -> list[str]:
    inputs = [flag for path in files for flag in ("--input", str(path))]
    return [sys.executable, "-m", "curation", "run", str(recipe), *inputs, "--output", str(output), "--num-cpus", str(workers)]


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def part_digests(output: Path) -> dict[str, str]:
    """sha256 of every Parquet part's rows (read back and written as one Arrow stream), by path."""
    digests = {}
    for path in sorted(output.rglob("*.parquet")):
        table = pq.read_table(path).combine_chunks()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        digests[str(path.relative_to(output))] = hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()
    return digests


def measure(files: list[Path], pages: int, recipe: Path, output: Path, workers: int) -> dict:
    command = curate_command(files, recipe, output, workers)
    log = output.with_suffix(".log")
    started = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        peaks = RolePeaks(process.pid)
        code = process.wait()
    wall = time.perf_counter() - started
    peaks.stop()
    text = log.read_text()
    if code:
        raise SystemExit(f"{' '.join(command)} exited {code}:\n{text[-3000:]}")
    stats = json.loads((output / "stats.json").read_text())["stages"]
    passes = {stage["stage"]: round(sum(step["seconds"] for step in stage["pass"].values()), 1) for stage in stats if "pass" in stage}
    pass_memory = {stage["stage"]: max(([step.get("rss_peak_mib", 0), step.get("rss_start_mib", 0)] for step in stage["pass"].values()), default=None)
                   for stage in stats if "pass" in stage}  # fmt: skip
    disk = {stage["stage"]: round(folder_bytes(output / stage["stage"]) / 2**20, 1) for stage in stats if (output / stage["stage"]).is_dir()}
    spilled = [line.strip() for line in text.splitlines() if "Spilled" in line]
    return {"pages": pages, "files": len(files), "wall_s": round(wall, 1), "pages_per_s": round(pages / wall, 1),
            **peaks.peaks(), "pass_seconds": passes, "pass_peak_and_start_mib": pass_memory, "manifest_mib": round((output / "manifest.json").stat().st_size / 2**20, 2),
            "disk_mib": disk, "kept": sum(shard["docs_out"] for shard in stats[-1]["shards"]),
            "spilled": spilled[-1] if spilled else "none reported"}  # fmt: skip


def killed_and_resumed(files: list[Path], recipe: Path, output: Path, workers: int, kill_at: float) -> dict:
    """Run, SIGKILL its whole process group once the manifest records kill_at of the run's (stage, file) entries,
    then run the same command again."""
    command = curate_command(files, recipe, output, workers)
    stages = len(yaml.safe_load(recipe.read_text())["stages"]) + 1  # the read stage too
    entries = stages * len(files)
    with open(output.with_suffix(".log"), "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        while process.poll() is None and recorded_entries(output) < kill_at * entries:
            time.sleep(0.2)
        killed = process.poll() is None
        if killed:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    done_at_kill = recorded_entries(output)
    started = time.perf_counter()
    resumed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if resumed.returncode:
        raise SystemExit(f"the resumed run exited {resumed.returncode}:\n{resumed.stdout[-3000:]}{resumed.stderr[-3000:]}")
    return {"killed": killed, "entries": entries, "entries_done_at_kill": done_at_kill,
            "resume_wall_s": round(time.perf_counter() - started, 1)}  # fmt: skip


def recorded_entries(output: Path) -> int:
    """(stage, file) entries the manifest records as done (0 before it exists or while it is being replaced)."""
    try:
        return sum(len(stage.get("shards", {})) for stage in json.loads((output / "manifest.json").read_text())["stages"].values())
    except (OSError, ValueError, KeyError, AttributeError):
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="25000,100000,250000", help="pages per run, comma-separated, increasing")
    parser.add_argument("--pages-per-file", type=int, default=6250)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", default="resiliparse", help="extract backend (trafilatura, resiliparse, resiliparse_blocks)")
    parser.add_argument("--kill-at", type=float, default=0.6, help="share of the (stage, file) entries recorded when the resume run is killed (0: no resume run)")
    parser.add_argument("--sentences", type=Path, default=SHARED_SENTENCES, help="<lang>.txt files of sentences")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="work folder kept (and its generated WARC files reused)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    work = args.keep or Path(tempfile.mkdtemp(prefix="soak-"))
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load {os.getloadavg()}, work folder {work}", flush=True)
    started = time.perf_counter()
    all_files = generate(work / "warc", max(sizes), args.pages_per_file, args.seed, args.sentences, args.workers)
    compressed = folder_bytes(work / "warc")
    print(f"generated {max(sizes):,} pages in {len(all_files)} files, {compressed / max(sizes) / 1000:.1f} KB per page "
          f"compressed ({time.perf_counter() - started:.0f} s)", flush=True)  # fmt: skip
    recipe = soak_recipe(work / "recipe.yaml", args.backend)
    rows = []
    for size in sizes:
        files = all_files[: -(-size // args.pages_per_file)]
        output = work / f"run-{size}"
        row = measure(files, size, recipe, output, args.workers)
        base = rows[0] if rows else row
        row["pages_per_s_ratio"] = round(row["pages_per_s"] / base["pages_per_s"], 3)
        row["worker_mib_ratio"] = round(row["worker_mib"] / base["worker_mib"], 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"rows": rows}
    if args.kill_at > 0:
        largest = sizes[-1]
        files = all_files[: -(-largest // args.pages_per_file)]
        resumed = killed_and_resumed(files, recipe, work / f"resumed-{largest}", args.workers, args.kill_at)
        same = part_digests(work / f"resumed-{largest}") == part_digests(work / f"run-{largest}")
        result["resume"] = {**resumed, "same_output": same}
        print(json.dumps(result["resume"]), flush=True)
    print(f"load after {os.getloadavg()}, {time.perf_counter() - started:.0f} s in all")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
