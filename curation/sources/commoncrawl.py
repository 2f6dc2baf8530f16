"""Common Crawl WARC locations: a crawl's `warc.paths.gz` listing turned into fetchable URLs."""

import re

import fsspec

CC_HTTPS = "https://data.commoncrawl.org/"
CC_S3 = "s3://commoncrawl/"
_SNAPSHOT = re.compile(r"CC-MAIN-\d{4}-\d{2}")


def warc_paths_url(snapshot: str, base: str = CC_HTTPS) -> str:
    return f"{base}crawl-data/{snapshot}/warc.paths.gz"


def commoncrawl_warc_urls(
    snapshot: str, max_files: int | None = None, paths_file: str | None = None, base: str = CC_HTTPS
) -> list[str]:
    """The first `max_files` WARC URLs of a crawl, from its paths listing (a local copy when `paths_file` is given)."""
    if not _SNAPSHOT.fullmatch(snapshot):
        raise ValueError(f"snapshot must look like CC-MAIN-2024-10, got {snapshot!r}")
    listing = paths_file or warc_paths_url(snapshot, base)
    compression = "gzip" if listing.endswith(".gz") else None
    urls = []
    with fsspec.open(listing, "rt", compression=compression) as lines:
        for line in lines:
            path = line.strip()
            if not path:
                continue
            if f"/{snapshot}/" not in path:
                raise ValueError(f"{listing}: line {path!r} is not a {snapshot} WARC path")
            urls.append(base + path)
            if max_files is not None and len(urls) >= max_files:
                break
    return urls


def snapshot_of(path: str) -> str | None:
    """The crawl name embedded in a Common Crawl path, if any."""
    found = _SNAPSHOT.search(path)
    return found.group(0) if found else None
