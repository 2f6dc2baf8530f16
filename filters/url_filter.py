"""URL filter: FineWeb's lists, decided exactly as datatrove's URLFilter does, plus the user's own blocklists.

FineWeb's lists ship in datatrove's wheel (4.56M domains and 19.6k URLs in a tar.gz, three word lists). datatrove
unpacks the tarball and loads it into Python sets in every worker (~600 MB and seconds each); here it is turned
once per machine (filters.packaged.cached) into a sorted file of the domains' 64-bit hashes, searched by reading one
bucket of it (`SortedHashes`: 36 MB of page cache shared by all workers, none of it in their RSS), and a JSON list of
the URLs. The checks, their order and their quirks are datatrove's (`URLFilter.filter`): the tldextract registered domain then the full host against the
domains (remembered per host), the whole URL string against the URLs, the URL's words (case kept) against the
banned words and the soft banned words, then banned subwords in the normalized URL. tldextract uses its bundled
suffix list, never the network.
"""

import hashlib
import io
import json
import re
import tarfile
from array import array
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator

from filters.base import Annotation, Stage, StageParams
from filters.packaged import NpyOnDisk, cached, file_digest

EXAMPLE_LISTS = "blocklists"
FINEWEB_BLOCKLIST = "url_filterblacklistsv0_3_0.tar.gz"
HOST_CACHE = 1 << 16  # domain verdicts remembered per host (a few MB)
TOP_BITS_SHIFT = 48  # a hash's top 16 bits pick its bucket (SortedHashes)
NON_ALNUM = re.compile(r"[^a-zA-Z0-9]+")  # datatrove's `normalizer`


def normalize(text: str) -> str:
    return NON_ALNUM.sub("", text).lower()


def datatrove_entries(lines, normalized: bool):
    """The entries datatrove's `parse_list` makes its set of (a blank line gives "", as there)."""
    return (normalize(x) if normalized else x.strip() for x in lines if x[0] != "#")


def digest(text: str) -> int:
    """64-bit blake2b: how the domains are kept (a false match is ~1 in 4e12 lookups)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


def host_key(url: str) -> str:
    """The URL cut at the first "/" after its first "//" (without one, after its first character): it holds all
    that tldextract reads (`lenient_netloc`), so tldextract's verdict on a URL is a function of this key."""
    end = url.find("/", url.find("//") + 2)
    return url if end < 0 else url[:end]


def build_blocklist(tarball: Path):
    def build(folder: Path) -> None:
        with tarfile.open(tarball, "r:gz") as tar:
            def entries(name: str):
                return datatrove_entries(io.TextIOWrapper(tar.extractfile(name), encoding="utf-8"), normalized=False)

            (folder / "urls.json").write_text(json.dumps(sorted(set(entries("urls")))))  # 19.6k: a set per worker
            domains = np.sort(np.fromiter(map(digest, entries("domains")), np.int64))
            np.save(folder / "domains.npy", domains)
            np.save(folder / "domain_buckets.npy", bucket_starts(domains))

    return build


class SortedHashes:
    """The sorted hashes file searched by reading it (filters.packaged.NpyOnDisk), through an index of where each
    value of the hashes' top 16 bits starts (`bucket_starts`, 512 KiB in memory): a lookup reads the ~70 hashes of
    one bucket in one system call, about as fast as a binary search of the mapped file was (benchmarks/
    url_filter_vs_datatrove.py: 2.94x and 3.06x datatrove's URLs/s in two runs, 3.15x mapped)."""

    def __init__(self, path: Path, starts_path: Path):
        self.file = NpyOnDisk(path, "<i8", ndim=1)
        self.starts = array("q", np.load(starts_path).astype(np.int64).tobytes())  # Python ints when indexed

    def __contains__(self, value: int) -> bool:
        bucket = (value >> TOP_BITS_SHIFT) + (1 << 15)
        run, key = self.file.rows_between(self.starts[bucket], self.starts[bucket + 1]), value.to_bytes(8, "little", signed=True)
        found = run.find(key)
        while found > 0 and found % 8:  # a match across two hashes
            found = run.find(key, found + 1)
        return found >= 0


def bucket_starts(hashes: np.ndarray) -> np.ndarray:
    """Where each bucket of sorted int64 hashes (by their top 16 bits, in signed order) starts, and the end."""
    lowest = (np.arange(1 << 16, dtype=np.int64) - (1 << 15)) << TOP_BITS_SHIFT
    return np.append(hashes.searchsorted(lowest), len(hashes))


def list_path(name: str) -> Path:
    """A list file; a bare name means a list shipped with the recipes."""
    path = Path(name)
    if not path.is_file():
        shipped = resources.files("curation") / "recipes" / EXAMPLE_LISTS / name
        if not shipped.is_file():
            raise ValueError(f"blocklist {name!r} is neither a file nor a list shipped in curation/recipes/{EXAMPLE_LISTS}/")
        path = Path(str(shipped))
    return path


def read_list(name: str) -> list[str]:
    """Entries of a user's list file, lower-cased (blank lines and # comments skipped)."""
    lines = list_path(name).read_text(encoding="utf-8").splitlines()
    return [entry for line in lines if (entry := line.split("#", 1)[0].strip().lower())]


class UrlFilterParams(StageParams):
    fineweb_lists: bool = Field(True, description="FineWeb's lists as datatrove ships them, decided as its URLFilter")
    soft_word_threshold: int = Field(2, description="drop a URL with this many soft banned words (FineWeb's lists)")
    domain_lists: list[str] = Field(default_factory=list, description="files of blocked domains (subdomains included)")
    substring_lists: list[str] = Field(default_factory=list, description="files of blocked URL substrings")
    drop_missing_url: bool = False

    @field_validator("domain_lists", "substring_lists")
    @classmethod
    def lists_exist(cls, names: list[str]) -> list[str]:
        for name in names:
            list_path(name)
        return names


class UrlFilter(Stage):
    name = "url_filter"
    Params = UrlFilterParams
    requires = ("id", "url")

    def loaded_files(self) -> list[str]:
        return [str(list_path(name)) for name in (*self.params.domain_lists, *self.params.substring_lists)]

    def setup(self) -> None:
        self.domains = {d.lstrip(".") for name in self.params.domain_lists for d in read_list(name)}
        self.substrings = [s for name in self.params.substring_lists for s in read_list(name)]
        if self.params.fineweb_lists:
            self.load_fineweb()

    def load_fineweb(self) -> None:
        import ahocorasick
        from tldextract import TLDExtract

        assets = Path(str(resources.files("datatrove") / "assets"))
        tarball = assets / FINEWEB_BLOCKLIST
        key = file_digest(tarball, extra=f"blake2b-8 domains.npy, domain_buckets.npy >> {TOP_BITS_SHIFT}, urls.json")
        folder = cached("url_blocklist", key, build_blocklist(tarball))
        self.listed_domains = SortedHashes(folder / "domains.npy", folder / "domain_buckets.npy")
        self.listed_urls = set(json.loads((folder / "urls.json").read_text()))

        def words(name: str) -> set[str]:
            with open(assets / name, encoding="utf-8") as lines:
                return set(datatrove_entries(lines, normalized=True))

        self.banned_words, self.soft_words = words("banned_words.txt"), words("soft_banned_words.txt")
        self.subwords = ahocorasick.Automaton(ahocorasick.STORE_INTS)
        for index, word in enumerate(words("banned_subwords.txt")):
            self.subwords.add_word(word, index)
        self.subwords.make_automaton()
        self.extractor = TLDExtract(cache_dir=None, suffix_list_urls=())  # the bundled suffix list: no network, no files
        self.hosts: dict[str, str | None] = {}  # host_key -> the domain verdict

    def domain_listed(self, domain: str) -> bool:
        return digest(domain) in self.listed_domains

    def host_reason(self, url: str) -> str | None:
        host = host_key(url)
        if host in self.hosts:
            return self.hosts[host]
        if len(self.hosts) >= HOST_CACHE:
            self.hosts.clear()
        parts = self.extractor(url)
        reason = ("url_domain" if self.domain_listed(parts.top_domain_under_public_suffix)
                  else "url_subdomain" if self.domain_listed(parts.fqdn) else None)  # fmt: skip
        self.hosts[host] = reason
        return reason

    def fineweb_reason(self, url: str) -> str | None:
        if reason := self.host_reason(url):
            return reason
        if url in self.listed_urls:
            return "url_listed"
        words = set(NON_ALNUM.split(url))
        if not words.isdisjoint(self.banned_words):
            return "url_hard_blacklisted"
        if len(words & self.soft_words) >= self.params.soft_word_threshold:
            return "url_soft_blacklisted"
        if next(self.subwords.iter(normalize(url)), False):
            return "url_blacklisted_subword"
        return None

    def user_reason(self, url: str) -> str | None:
        if self.domains:
            labels = (urlsplit(url).hostname or "").split(".")
            if any(".".join(labels[i:]) in self.domains for i in range(len(labels))):
                return "url_blocked_domain"
        if self.substrings:
            lowered = url.lower()
            if any(s in lowered for s in self.substrings):
                return "url_blocked_substring"
        return None

    def verdict(self, url: str | None) -> str | None:
        """None keeps the URL; FineWeb's lists are checked before the user's."""
        if not url:
            return "url_missing" if self.params.drop_missing_url else None
        return (self.params.fineweb_lists and self.fineweb_reason(url)) or self.user_reason(url)

    def annotate(self, table: pa.Table) -> Annotation:
        return Annotation(reasons=[self.verdict(url) for url in table["url"].to_pylist()], columns={})


def datatrove_reference(assets_dir: str | None = None):
    """datatrove's URLFilter with FineWeb's lists, judging one URL like `UrlFilter.verdict` (reasons named as ours).

    The reference this stage is held to (tests, benchmark). Its tldextract is made offline like ours; it unpacks
    the tarball into `assets_dir` (default: huggingface_hub's assets cache), as its `download_data` does.
    """
    from unittest import mock

    from datatrove.data import Document
    from datatrove.pipeline.filters import URLFilter
    from huggingface_hub.utils import _cache_assets
    from tldextract import TLDExtract

    reference = URLFilter()
    reference.tldextractor = TLDExtract(cache_dir=None, suffix_list_urls=())
    with mock.patch.object(_cache_assets, "HF_ASSETS_CACHE", assets_dir or _cache_assets.HF_ASSETS_CACHE):
        reference.download_data()

    def judge(url: str) -> str | None:
        verdict = reference.filter(Document(text="", id="0", metadata={"url": url}))
        return None if verdict is True else "url_listed" if verdict[1] == "url" else f"url_{verdict[1]}"

    return judge
