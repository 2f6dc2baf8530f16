"""Files that ship inside the package (models, benchmarks, labelled text; see filters/assets/README.md) and the
per-machine cache that derived files (an unpacked blocklist, a benchmark index) are built into once.

The cache is `$CURATE_CACHE`, else `~/.cache/pretrain-stack`. An entry is a folder named by the content hash of
what it was built from, written under a temporary name and renamed when complete, so concurrent workers on one
machine build it at most a few times at once and never read a half-written one.
"""

import hashlib
import math
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np

CACHE_ENV = "CURATE_CACHE"


def asset(*parts: str) -> Path:
    """A file shipped in filters/assets/ (a real path: the package is installed from files, never zipped)."""
    return Path(str(resources.files("filters").joinpath("assets", *parts)))


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "pretrain-stack")


def file_digest(*paths: Path | str, extra: str = "") -> str:
    """sha256 of the files' bytes (and `extra`), the key of what is built from them."""
    digest = hashlib.sha256(extra.encode())
    for path in paths:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:20]


def cached(kind: str, key: str, build: Callable[[Path], None]) -> Path:
    """The cache folder `kind/key`, calling `build(folder)` into a temporary folder first if it is not there yet."""
    final = cache_root() / kind / key
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=final.parent))
    try:
        build(staging)
        staging.chmod(0o755)  # mkdtemp makes it private; the cache serves every user of the machine
        try:
            staging.rename(final)
        except OSError:  # another worker finished first: its folder is as good as ours
            if not final.is_dir():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final


class NpyOnDisk:
    """A cached .npy (format 1.0, C order) read row by row with pread, never memory-mapped. The kernel maps a mapped
    file's page-cache folios whole (Linux 6.18 on ext4: one binary search of a mapped 36 MiB file put 6 MiB in the
    process's RSS, ten searches 26 MiB), so a worker reading a few scattered rows held megabytes it never read. Read,
    the pages stay in the page cache, shared by the machine's workers and in none's RSS; a row costs a system call
    (~1 us), fine for the rows a worker reads seldom."""

    def __init__(self, path: Path, dtype: str, ndim: int):
        with open(path, "rb") as file:
            header = np.lib.format.read_array_header_1_0(file) if np.lib.format.read_magic(file) == (1, 0) else None
            self.offset = file.tell()
        if header is None or header[2] != np.dtype(dtype) or len(header[0]) != ndim or header[1]:
            raise ValueError(f"{path}: not a {ndim}-D {np.dtype(dtype)} array in C order in .npy format 1.0")
        self.path, self.shape, self.dtype = Path(path), header[0], header[2]
        self.row_size = self.dtype.itemsize * math.prod(self.shape[1:])
        self.fd = os.open(path, os.O_RDONLY)
        weakref.finalize(self, os.close, self.fd)

    def __reduce__(self):
        """Pickled (into a Ray task, a forked worker) as its path: the copy opens its own descriptor."""
        return NpyOnDisk, (self.path, self.dtype.str, len(self.shape))

    def __len__(self) -> int:
        return self.shape[0]

    def rows_between(self, start: int, stop: int) -> bytes:
        if not 0 <= start <= stop <= self.shape[0]:
            raise IndexError(f"rows {start}..{stop} of {self.shape[0]} in {self.path}")
        size = (stop - start) * self.row_size
        data = os.pread(self.fd, size, self.offset + start * self.row_size)
        if len(data) != size:
            raise OSError(f"{self.path}: read {len(data)} of {size} bytes at row {start} (was the file truncated?)")
        return data

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        """The rows at `rows`, in that order, as one array: what indexing the array with `rows` gives (~0.6 us a row)."""
        if not isinstance(rows, np.ndarray) or rows.ndim != 1 or rows.dtype.kind not in "iu":
            raise TypeError(f"{self.path}: only a 1-D integer array of row numbers indexes a file read by row, not {rows!r}")
        if len(rows) and not 0 <= rows.min() <= rows.max() < self.shape[0]:
            raise IndexError(f"rows {rows.min()}..{rows.max()} of {self.shape[0]} in {self.path}")
        out = np.empty((len(rows), *self.shape[1:]), self.dtype)
        into, size = memoryview(out.view(np.uint8).reshape(-1)), self.row_size
        for position, index in enumerate(rows.tolist()):
            got = os.preadv(self.fd, (into[position * size : (position + 1) * size],), self.offset + index * size)
            if got != size:
                raise OSError(f"{self.path}: read {got} of {size} bytes at row {index} (was the file truncated?)")
        return out
