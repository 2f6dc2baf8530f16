"""Where documents come from: WARC/WET files, Common Crawl listings, folders of saved web pages, Parquet documents,
plain-text corpora, code trees and the built-in sample snapshot. `readers.read_input` turns one input file (or folder)
of a recipe's source into a table of documents."""

from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa


@dataclass
class ReadResult:
    table: pa.Table
    dropped: Counter = field(default_factory=Counter)
    sha256: str = ""
    bytes_in: int | None = None  # when the input is not one file (a code repository, a folder of pages or prose)
    records: int | None = None  # WARC records parsed, kept or dropped; None: every document and drop is one
    # (path, reason, bytes; 0 where not read) of each file or record dropped, where the reader names them (text, HTML
    # pages and code; a WARC file's records and a Parquet file's rows without text are counts only)
    removed: list[tuple[str, str, int]] = field(default_factory=list)

    def drop(self, reason: str, path: str, size: int) -> None:
        """Counts a drop and names what was dropped, so a run can say which file it was (stats.json, --keep-removed)."""
        self.dropped[reason] += 1
        self.removed.append((displayable(path), reason, size))


def displayable(name: str) -> str:
    """A file name as UTF-8 text: bytes that are not (a Latin-1 name on disk or in an archive) become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
