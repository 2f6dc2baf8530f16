"""The url_filter stage against datatrove's URLFilter (FineWeb's lists): same decisions on thousands of URLs."""

import glob
import io
import random
import tarfile
from collections import Counter
from importlib import resources
from pathlib import Path

import pyarrow as pa
import pytest

from curation.recipe import RecipeError, load_recipe
from curation.sources.warc import WarcReader
from filters import url_filter
from filters.url_filter import FINEWEB_BLOCKLIST, UrlFilter, datatrove_reference, host_key
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.filterwarnings("ignore:The 'registered_domain' property is deprecated:DeprecationWarning")
ASSETS = Path(str(resources.files("datatrove") / "assets"))


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """A fresh per-machine cache for the module, counting how often the blocklist is built into it."""
    count = []
    build_blocklist = url_filter.build_blocklist

    def counted(tarball):
        build = build_blocklist(tarball)
        return lambda folder: (count.append(folder), build(folder))

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CURATE_CACHE", str(tmp_path_factory.mktemp("cache")))
        patch.setattr(url_filter, "build_blocklist", counted)
        yield count


@pytest.fixture(scope="module")
def stage(builds):
    stage = UrlFilter()
    stage.setup()
    return stage


def words(name: str) -> list[str]:
    return [w.strip().lstrip("#") for w in (ASSETS / name).read_text().splitlines() if w.strip()]


def sample_urls(seed: int = 0) -> list[str]:
    """Listed domains and URLs from the tarball, banned (sub)words in both cases, IP and odd hosts, clean URLs."""
    rng = random.Random(seed)
    with tarfile.open(ASSETS / FINEWEB_BLOCKLIST, "r:gz") as tar:
        lines = io.TextIOWrapper(tar.extractfile("domains"), encoding="utf-8")
        domains = [line.strip() for line in lines if rng.random() < 1.5e-4]
        listed = [line.strip() for line in io.TextIOWrapper(tar.extractfile("urls"), encoding="utf-8")]
    urls = []
    for d in domains:
        urls += [f"https://{d}/", f"http://www.{d}/page.html", f"https://cdn.{rng.choice(['img', 'm'])}.{d}/a?q=1"]
        urls.append(rng.choice([d, f"HTTP://WWW.{d.upper()}/", f"//{d}/x", f"http://u@{d}:8080/", f"http://{d}./"]))
    for u in rng.sample(listed, 300):
        urls += [u, f"https://{u}", rng.choice([f"http://{u}/", u.upper()])]
    for w in words("banned_words.txt"):
        urls += [f"https://site.org/{w.replace(' ', '-')}/x", f"http://{w.replace(' ', '')}.site.org/"]
        urls.append(f"https://site.org/{w.upper()}")
    soft = words("soft_banned_words.txt")
    for _ in range(300):
        a, b = rng.sample(soft, 2)
        urls += [f"https://news.example.com/{a}-{b}.html", f"https://news.example.com/{a.title()}/{b.upper()}"]
        urls.append(f"https://news.example.com/{a}")
    for w in words("banned_subwords.txt"):
        urls += [f"https://shop.example.net/x{w.replace(' ', '-')}y", f"http://{w.upper().replace(' ', '_')}.example.net/"]
    urls += [f"http://{rng.randrange(256)}.{rng.randrange(256)}.0.1/{p}" for p in ("", "sex", "x?q=1") for _ in range(10)]
    urls += ["http://[::1]/", "http://[2001:db8::1]:8080/porn", "http://localhost:8080/", "http://printer.local/",
             "https://foo.bar.invalidtld/", "http://intranet/", "https://example.com", "ftp://ftp.example.org/file"]  # fmt: skip
    for path in sorted(glob.glob(str(SHARED_DATA / "warc" / "*.warc.gz"))):  # real clean URLs, when ../shared is here
        urls += [u for u in WarcReader("test").read(path).table["url"].to_pylist() if u]
    vocab = ["news", "weather", "garden", "recipes", "science", "travel", "books", "music", "city", "school", "blog"]
    tlds = ["com", "org", "net", "co.uk", "de", "fr", "io", "com.au", "blogspot.com", "github.io"]
    for _ in range(800):
        host = ".".join(rng.sample(vocab, rng.randint(1, 3)))
        urls.append(f"https://{host}.{rng.choice(tlds)}/{'/'.join(rng.sample(vocab, rng.randint(0, 3)))}")
    return urls


def test_decisions_match_datatrove_url_filter(stage, tmp_path):
    urls = sample_urls()
    theirs = datatrove_reference(str(tmp_path))
    expected, got = [theirs(u) for u in urls], [stage.verdict(u) for u in urls]
    differ = [(u, e, g) for u, e, g in zip(urls, expected, got) if e != g]
    counts = Counter(got)
    print(f"\nurl_filter vs datatrove URLFilter on {len(urls)} URLs: {len(differ)} differ; ours {dict(counts)}")
    assert differ == [], differ[:10]
    assert Counter(expected) == counts
    reasons = {"url_domain", "url_subdomain", "url_listed", "url_hard_blacklisted", "url_soft_blacklisted",
               "url_blacklisted_subword"}  # fmt: skip
    assert reasons <= set(counts) and counts[None] > 1000
    from tldextract.remote import lenient_netloc

    assert all(lenient_netloc(host_key(u)) == lenient_netloc(u) for u in urls)  # the per-host memo is exact


def test_blocklist_is_built_once_per_machine(stage, builds):
    again = UrlFilter()
    again.setup()
    assert len(builds) == 1 and again.verdict("https://0-1sex.com/") == "url_domain"
    assert len(list(Path(builds[0]).parent.glob("[!.]*"))) == 1  # one finished folder, no staging left over


def test_the_hashes_file_is_searched_as_numpy_searches_it(tmp_path):
    """SortedHashes reads a bucket of the file instead of mapping it; it must find exactly what a search of the array
    finds, at the ends too, and never a hash spelled across two listed ones."""
    import numpy as np

    rng = np.random.default_rng(0)
    # a, b: adjacent in one bucket, with a's last 4 bytes and b's first 4 spelling `across`, which is not listed
    a, b, across = 0x1234 << 48, 0x1234 << 48 | 0xFFFF << 32 | 0x1234 << 16, 0x1234 << 48 | 0x1234 << 16
    ends = [-(2**63), -1, 0, 2**63 - 1, a, b]
    hashes = np.sort(np.append(rng.integers(-(2**63), 2**63 - 1, 20_000, dtype=np.int64), ends))
    np.save(tmp_path / "hashes.npy", hashes)
    np.save(tmp_path / "starts.npy", url_filter.bucket_starts(hashes))
    probes = np.concatenate([hashes[::37], hashes[[0, -1]], rng.integers(-(2**63), 2**63 - 1, 2_000, dtype=np.int64),
                             [-(2**63) + 1, 1, 2**63 - 2, across], hashes[1:50] + 1])  # fmt: skip
    searched = url_filter.SortedHashes(tmp_path / "hashes.npy", tmp_path / "starts.npy")
    assert [int(p) in searched for p in probes] == np.isin(probes, hashes).tolist()


def test_user_lists_add_to_fineweb_lists(stage, tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_text("# mine\nclean-but-mine.org\n")
    params = UrlFilter.Params(domain_lists=[str(mine)], substring_lists=["example-url-substrings.txt"],
                              drop_missing_url=True)  # fmt: skip
    urls = ["https://www.clean-but-mine.org/a", "https://ok.org/casino/today", "https://0-1sex.com/",
            "https://ok.org/fine", None]  # fmt: skip
    result = UrlFilter(params).process(pa.table({"id": [str(i) for i in range(len(urls))], "url": urls}))
    reasons = ["url_blocked_domain", "url_blocked_substring", "url_domain", "url_missing"]
    assert result.removed["drop_reason"].to_pylist() == reasons
    assert result.kept["url"].to_pylist() == ["https://ok.org/fine"]


def test_missing_list_file_fails_at_recipe_load(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nstages:\n  - stage: url_filter\n    params: {domain_lists: [x.txt]}\n")
    expected = r"stages\[0\]\.params\.domain_lists: blocklist 'x.txt' is neither a file"
    with pytest.raises(RecipeError, match=expected):
        load_recipe(str(recipe))
    assert load_recipe("fineweb-snapshot").build(0).params.fineweb_lists
