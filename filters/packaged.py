"""Files that ship inside the package (models, benchmarks, labelled text; see filters/assets/README.md) and the
per-machine cache that derived files (an unpacked blocklist, a benchmark index) are built into once.

The cache is `$CURATE_CACHE`, else `~/.cache/pretrain-stack`. An entry is a folder named by the content hash of
what it was built from, written under a temporary name and renamed when complete, so concurrent workers on one
machine build it at most a few times at once and never read a half-written one.
"""

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path

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
