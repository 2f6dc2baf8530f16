"""What a run's results depend on beyond its recipe: the files its stages load (models, indexes, lists) and the input
each shard reads. A stage's identity includes the content digest of every file it loads, so a retrained classifier
or a rebuilt index reruns that stage and what follows; a shard's input is stamped (size and modification time) when
it is read, so an input rewritten in place reruns its shard.

A content digest is cached per file by (size, modification time) in the per-machine cache: a resumed run of a
multi-GB model hashes it once, not at every start.
"""

import hashlib
import json
import os
from pathlib import Path

import fsspec

from filters.packaged import cache_root

CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """A local file's sha256, cached by (size, mtime): a file rewritten in place has a new mtime and is hashed again."""
    path = path.resolve()
    stat = path.stat()
    stamp = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    entry = cache_root() / "digests" / f"{hashlib.sha1(str(path).encode()).hexdigest()}.json"
    try:
        cached = json.loads(entry.read_text())
        if {key: cached.get(key) for key in stamp} == stamp:
            return cached["sha256"]
    except (OSError, ValueError, KeyError):
        pass
    sha = _sha256(path)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        temporary = entry.with_name(f"{entry.name}.tmp-{os.getpid()}")
        temporary.write_text(json.dumps({**stamp, "sha256": sha}))
        temporary.replace(entry)
    except OSError:  # an unwritable cache costs a rehash next time, never the run
        pass
    return sha


def path_digest(path: str) -> str | None:
    """The content digest of a file, or of a folder's files with their relative names (a Hugging Face model folder);
    a remote path's by what its store says of it (ETag, size, time); None where nothing is there (a hub id, an
    installed package's name): then the name alone is its identity."""
    if "://" in path:
        fs, root = fsspec.core.url_to_fs(path)
        if not fs.exists(root):
            return None
        found = fs.find(root, detail=True) if fs.isdir(root) else {root: fs.info(root)}
        described = sorted((name, info.get("ETag") or info.get("etag") or info.get("md5Hash"), info.get("size"),
                            str(info.get("LastModified") or info.get("mtime") or info.get("updated")))
                           for name, info in found.items())  # fmt: skip
        return hashlib.sha256(json.dumps(described, default=str).encode()).hexdigest()[:20]
    local = Path(path).expanduser()
    if local.is_file():
        return file_sha256(local)[:20]
    if local.is_dir():
        files = sorted(p for p in local.rglob("*") if p.is_file())
        listing = [(str(p.relative_to(local)), file_sha256(p)) for p in files]
        return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:20]
    return None


def loaded_digests(paths: list[str]) -> dict[str, str | None]:
    return {path: path_digest(path) for path in paths}


def _stamp(root: str, found: dict) -> str:
    described = sorted((name.removeprefix(root), info.get("size"), info.get("ETag") or info.get("etag"),
                        str(info.get("mtime") or info.get("LastModified") or info.get("updated") or info.get("created")))
                       for name, info in found.items())  # fmt: skip
    return hashlib.sha256(json.dumps(described, default=str).encode()).hexdigest()[:20]


def input_stamp(path: str) -> str | None:
    """A cheap stamp of an input as it is now: its size and modification time (ETag on an object store), or for a
    folder (a code repository, a folder of saved pages) those of every file in it; None when it cannot be read (the
    read reports that itself)."""
    try:
        fs, root = fsspec.core.url_to_fs(path)
        return _stamp(root, fs.find(root, detail=True) if fs.isdir(root) else {root: fs.info(root)})
    except (OSError, ValueError):
        return None


def input_stamps(paths: list[str]) -> list[str | None]:
    """input_stamp of each path, the files of one folder from one listing: a resumed run over 90,000 objects costs
    90 listings, not 90,000 requests."""
    listings: dict[tuple, dict] = {}
    stamps = []
    for path in paths:
        fs, root = fsspec.core.url_to_fs(path)
        parent = root.rstrip("/").rsplit("/", 1)[0]
        key = (path.split("://")[0] if "://" in path else "", parent)
        if key not in listings:
            try:
                listings[key] = {entry["name"].rstrip("/"): entry for entry in fs.ls(parent, detail=True)}
            except (OSError, ValueError):
                listings[key] = {}
        entry = listings[key].get(root.rstrip("/"))
        if entry is not None and entry.get("type") == "file":
            stamps.append(_stamp(root, {root: entry}))
        else:
            stamps.append(input_stamp(path))
    return stamps


def same_content(path: str, sha256: str) -> bool:
    """Whether a local input file still holds the bytes whose sha256 its read recorded (a copied or touched file keeps
    its results); False for what cannot be checked so cheaply (a folder, a remote file): it reruns."""
    local = Path(path)
    return bool(sha256) and "://" not in path and local.is_file() and _sha256(local) == sha256
