"""Where documents come from: WARC/WET files, Common Crawl listings, Parquet documents, plain-text corpora, code
trees and the built-in sample snapshot. `readers.read_input` turns one input file of a recipe's source into a
table of documents."""

from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa


@dataclass
class ReadResult:
    table: pa.Table
    dropped: Counter = field(default_factory=Counter)
    sha256: str = ""
    bytes_in: int | None = None  # when the input is not one file (a code repository)
    records: int | None = None  # WARC records parsed, kept or dropped; None: every document and drop is one
