"""Web pages saved as files (a crawl kept as folders of HTML, extraction test suites): one document per page in the
READ schema, so the extract stage and every stage after it run on them as on WARC records.

An input is a directory (walked in sorted order, hidden folders skipped) or one file. Every `.html`, `.htm`, `.xhtml`,
`.html.gz` and `.htm.gz` file is a page; its charset is left to the extract stage to find, as for a WARC record that
declares none. Its URL is the first of: `STEM.url`'s first line; `STEM.json`'s `url`; the `url` of `metadata.json` or
`expected-metadata.json` in its folder; the `url` under its stem in a JSON mapping of page stems to objects, in its
folder or one above it within the input (article-extraction-benchmark's `ground-truth.json`); else its path in the
input folder, or the path as given for an input that is one page, so that pages saved as `*/source.html` each keep
the folder that tells them apart (as a WARC record's `warc_file` is its file as given). Those sidecars are metadata,
not counted. Every other file is counted and named as `not_html`, and a page that cannot be a document as
`not_a_file`, `file_too_large` (on disk or gunzipped), `unreadable` (a broken gzip too) or `empty_html`.
"""

import gzip
import hashlib
import io
import json
import os
import zlib
from collections.abc import Iterator

import pyarrow as pa

from curation.schema import READ_SCHEMA, document_id
from curation.sources import ReadResult, displayable
from curation.sources.local_files import input_files, load_file
from curation.sources.warc import payload_digest

PAGE_SUFFIXES = (".html.gz", ".htm.gz", ".xhtml", ".html", ".htm")  # `.xhtml` before `.html`, which it ends with
FOLDER_METADATA = ("metadata.json", "expected-metadata.json")


def page_stem(file: str) -> str | None:
    """A page's file name without its suffix; None for a file that is no page."""
    name = os.path.basename(file)
    suffix = next((s for s in PAGE_SUFFIXES if name.lower().endswith(s)), None)
    return name[: -len(suffix)] if suffix else None


def is_page(file: str) -> bool:
    return page_stem(file) is not None


def html_input(path: str) -> bool:
    """A local page or directory: what a `warc` source reads with this reader, beside its WARC files."""
    return "://" not in path and (os.path.isdir(path) or is_page(path))


def has_pages(path: str) -> bool:
    return any(map(is_page, input_files(path, "html")))


def _url(value: object) -> str | None:
    """The `url` of a sidecar's JSON object, where it has a non-blank one."""
    url = value.get("url") if isinstance(value, dict) else None
    return url.strip() if isinstance(url, str) and url.strip() else None


class _Sidecars:
    """The URLs that files beside the pages give them, and those files, which are metadata and never counted."""

    def __init__(self, candidates: list[str], pages: list[str], base: str, max_bytes: int):
        self.base, self.max_bytes = base, max_bytes
        stems = {(os.path.dirname(page), page_stem(page)) for page in pages}
        page_folders = {folder for folder, _ in stems}
        self.own: dict[tuple[str, str], str] = {}  # (folder, stem) -> STEM.url's, else STEM.json's
        self.folder: dict[str, str] = {}  # folder -> its metadata.json's
        self.mappings: dict[str, list[dict[str, str]]] = {}  # folder -> its JSON mappings of page stems to URLs
        self.files: set[str] = set()
        for file in candidates:
            folder, name = os.path.split(file)
            stem, suffix = os.path.splitext(name)
            if suffix.lower() == ".url" and (folder, stem) in stems:
                self.files.add(file)
                if url := self._first_line(file):
                    self.own[(folder, stem)] = url  # over STEM.json's, whichever comes first
            elif suffix.lower() != ".json":
                continue
            elif (folder, stem) in stems:
                self.files.add(file)
                if url := _url(self._json(file)):
                    self.own.setdefault((folder, stem), url)
            elif name.lower() in FOLDER_METADATA and folder in page_folders:
                self.files.add(file)
                if url := _url(self._json(file)):
                    self.folder[folder] = url
            else:
                content = self._json(file)
                values = content.items() if isinstance(content, dict) else ()
                urls = {key: url for key, value in values if (url := _url(value))}
                if any(key in urls for where, key in stems if where == folder or where.startswith(folder + os.sep)):
                    self.files.add(file)
                    self.mappings.setdefault(folder, []).append(urls)

    def url(self, page: str, relative: str) -> str:
        folder, stem = os.path.dirname(page), page_stem(page)
        if url := self.own.get((folder, stem)) or self.folder.get(folder):
            return url
        here = folder
        while True:
            for urls in self.mappings.get(here, ()):
                if stem in urls:
                    return urls[stem]
            if here == self.base or here == os.path.dirname(here):
                return relative
            here = os.path.dirname(here)

    def _first_line(self, file: str) -> str | None:
        data = load_file(file, self.max_bytes)[1]
        return None if isinstance(data, str) else data.decode("utf-8", "replace").partition("\n")[0].strip() or None

    def _json(self, file: str) -> object:
        data = load_file(file, self.max_bytes)[1]
        try:
            return None if isinstance(data, str) else json.loads(data)
        except ValueError:  # not JSON, or not UTF-8
            return None


class HtmlReader:
    """Reads the pages of a directory or one page file into document rows."""

    def __init__(self, snapshot: str, source: str = "web", max_payload_bytes: int = 5_000_000):
        self.snapshot, self.source, self.max_payload_bytes = snapshot, source, max_payload_bytes

    def read(self, path: str) -> ReadResult:
        result = ReadResult(READ_SCHEMA.empty_table())
        result.table = pa.concat_tables(self.read_batches(path, None, result))
        return result

    def read_batches(self, path: str, batch_documents: int | None, result: ReadResult) -> Iterator[pa.Table]:
        """The pages as tables of `batch_documents` rows (one table when None), so a worker holds a batch of a large
        folder; `result` counts what is dropped and gets the sha256 and bytes of the pages read."""
        given, path = path, os.path.abspath(path)
        base = path if os.path.isdir(path) else os.path.dirname(path)
        files = input_files(path, "html")
        pages = list(filter(is_page, files))
        beside = files if base == path else [os.path.join(base, name) for name in sorted(os.listdir(base))]
        sidecars = _Sidecars(beside, pages, base, self.max_payload_bytes)
        rows, batches, digest, size = [], 0, hashlib.sha256(), 0
        for file in files:
            if file in sidecars.files:
                continue
            if not is_page(file):  # not read: its size is listed, not counted in bytes_in
                result.drop("not_html", file, os.path.getsize(file) if os.path.isfile(file) else 0)
                continue
            file_size, data = load_file(file, self.max_payload_bytes)
            size += file_size
            if not isinstance(data, str):
                digest.update(data)
                data = self._page(file, data)
            if isinstance(data, str):
                result.drop(data, file, file_size)
                continue
            relative = displayable(os.path.relpath(file, base) if base == path else given)  # Latin-1 names too
            rows.append(self._document(data, sidecars.url(file, relative), relative))
            if batch_documents and len(rows) == batch_documents:
                yield pa.Table.from_pylist(rows, schema=READ_SCHEMA)
                rows, batches = [], batches + 1
        result.sha256, result.bytes_in = digest.hexdigest(), size
        if rows or not batches:
            yield pa.Table.from_pylist(rows, schema=READ_SCHEMA)

    def _page(self, file: str, data: bytes) -> bytes | str:
        """The page's HTML (gunzipped), or why it is none."""
        if file.lower().endswith(".gz"):
            try:
                with gzip.GzipFile(fileobj=io.BytesIO(data)) as unpacked:
                    data = unpacked.read(self.max_payload_bytes + 1)  # a gzip bomb stops at the limit
            except (OSError, EOFError, zlib.error):
                return "unreadable"
            if len(data) > self.max_payload_bytes:
                return "file_too_large"
        return data if data.strip() else "empty_html"

    def _document(self, page: bytes, url: str, relative: str) -> dict:
        """Its id is the same in every run, and two files are two documents even where their URL and bytes agree (a
        test suite's copies of one page): the file is the record, as a WARC record's id is."""
        digest = payload_digest(page)
        return {
            "id": document_id(relative, url, digest), "url": url, "source": self.source, "snapshot": self.snapshot,
            "warc_file": relative, "warc_digest": digest, "html": page, "content_type": "text/html", "charset": None,
        }  # fmt: skip
