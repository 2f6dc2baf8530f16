"""URL blocklists: drop documents whose domain (or a parent domain) or URL substring is listed in user-named files."""

from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
from pydantic import Field

from filters.base import Annotation, Stage, StageParams

EXAMPLE_LISTS = "blocklists"


def read_list(name: str) -> list[str]:
    """Entries of a list file (blank lines and # comments skipped); a bare name means a list shipped with the recipes."""
    path = Path(name)
    if not path.is_file():
        shipped = resources.files("curation") / "recipes" / EXAMPLE_LISTS / name
        if not shipped.is_file():
            raise FileNotFoundError(f"blocklist {name!r} is neither a file nor a list shipped in curation/recipes/{EXAMPLE_LISTS}/")
        path = Path(str(shipped))
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = line.split("#", 1)[0].strip().lower()
        if entry:
            entries.append(entry)
    return entries


class UrlFilterParams(StageParams):
    domain_lists: list[str] = Field(default_factory=list, description="files of blocked domains (subdomains included)")
    substring_lists: list[str] = Field(default_factory=list, description="files of blocked URL substrings")
    drop_missing_url: bool = False


class UrlFilter(Stage):
    name = "url_filter"
    Params = UrlFilterParams
    requires = ("id", "url")

    def setup(self) -> None:
        self.domains = {d.lstrip(".") for name in self.params.domain_lists for d in read_list(name)}
        self.substrings = [s for name in self.params.substring_lists for s in read_list(name)]

    def verdict(self, url: str | None) -> str | None:
        if not url:
            return "url_missing" if self.params.drop_missing_url else None
        host = (urlsplit(url).hostname or "").lower()
        labels = host.split(".")
        if any(".".join(labels[i:]) in self.domains for i in range(len(labels))):
            return "url_blocked_domain"
        lowered = url.lower()
        if any(s in lowered for s in self.substrings):
            return "url_blocked_substring"
        return None

    def annotate(self, table: pa.Table) -> Annotation:
        return Annotation(reasons=[self.verdict(url) for url in table["url"].to_pylist()], columns={})
