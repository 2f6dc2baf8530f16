"""Code repositories as documents: one shard per repository, one document per file, as The Stack builds them.

An input is one repository: a folder (a git checkout is read as `git ls-files`, so .gitignore'd files are not
content), a `.tar.gz`/`.tgz`/`.tar`/`.zip` archive of one (GitHub's single top folder stripped), or an installed
distribution (`*.dist-info`: the files its RECORD lists, license files included, its METADATA as `PKG-INFO`, the
name an sdist gives the same core metadata, for the license stage's declared licence). A Parquet file of files in The
Stack's layout (curation/sources/code_parquet.py) holds many. Every decodable text file (UTF-8, declared or detected
charset) becomes a document with its `repository` (`parent/name` of the folder or archive, as GitHub's `owner/name`)
and `path`; which are code is decided by the language stage (filters/code_language.py), whose funnel counts them, and
license files stay in so the license stage can read them. What cannot be a document is counted:
`vendored` (go-enry's vendor paths, virtual environments), `binary_file`, `undecodable`, `file_too_large`,
`not_a_file` (links, never followed; submodules), `unreadable`, `package_metadata` (RECORD, WHEEL, ... of a
distribution), `outside_distribution` (its scripts installed beside the interpreter).

The default corpus is this Python's standard library (a repository per top-level package, each with the standard
library's LICENSE.txt) and the distributions this project installs (its dependency closure).
"""

import glob
import gzip
import hashlib
import importlib.metadata
import io
import os
import re
import subprocess
import sysconfig
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import enry
import fsspec
import pyarrow as pa

from curation.schema import DOCUMENT_FIELDS
from curation.sources import ReadResult, displayable
from curation.sources.local_files import decode, load_file

VCS_DIRS = {".git", ".hg", ".svn"}  # version control state, not content: not read, not counted
SKIP_DIRS = VCS_DIRS | {"__pycache__"}
VENDORED = re.compile(r"(^|/)(\.?venv|site-packages|dist-packages|_vendor|vendored|\.tox)/")
ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip")
CODE_SCHEMA = pa.schema(DOCUMENT_FIELDS + [
    pa.field("repository", pa.string()), pa.field("path", pa.string()), pa.field("language", pa.string()),
    pa.field("license", pa.string()), pa.field("stars", pa.int64()),
])  # fmt: skip
PROJECT = "pretrain-stack"


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_inputs() -> list[str]:
    """The standard library as shards: each top-level package directory, and its loose modules as one glob."""
    root = stdlib_root()
    packages = sorted(str(p) for p in root.iterdir() if p.is_dir() and p.name not in SKIP_DIRS and not p.name.startswith("."))
    packages = [p for p in packages if not VENDORED.search(p + "/")]
    return [str(root / "*.py")] + packages


DATA_ONLY = ("licensedcode-data",)  # ScanCode's licence database (the license stage's): 37,000 licence texts, no code


def project_distributions(project: str = PROJECT) -> list[str]:
    """The dist-info folders of this project's installed dependency closure (extras not included): real repositories
    with their own licenses and tests, the same set on every machine that installs the project."""
    from packaging.requirements import Requirement

    def key(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    found, todo = {}, [project]
    while todo:
        name = todo.pop()
        if key(name) in found:
            continue
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found[key(name)] = distribution
        for requirement in map(Requirement, distribution.requires or []):
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    folders = []
    for name, distribution in found.items():
        folder = getattr(distribution, "_path", None)
        if name not in (key(project), *DATA_ONLY) and folder is not None and str(folder).endswith(".dist-info"):
            folders.append(str(folder))
    return sorted(folders)


def default_inputs() -> list[str]:
    return stdlib_inputs() + project_distributions()


def is_archive(path: str) -> bool:
    return path.lower().endswith(ARCHIVES)


class File(NamedTuple):
    """One file of a repository: its path inside it, how to get (bytes on disk, its bytes or why there are none), and
    where it is (on disk, or `ARCHIVE/member`), which a dropped file is listed by."""

    path: str
    load: Callable[[], tuple[int, bytes | str]]
    where: str


def _local(file: str, max_bytes: int):
    """A file's loader; a link is `not_a_file`, so a link to a file outside the repository never becomes content."""
    return lambda: (0, "not_a_file") if os.path.islink(file) else load_file(file, max_bytes)


def _walk(root: str, max_bytes: int) -> Iterator[File]:
    for folder, dirs, names in os.walk(root):  # links to folders are not followed: each is counted as not_a_file
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and d not in links)
        for name in sorted(names + links):
            full = os.path.join(folder, name)
            yield File(Path(os.path.relpath(full, root)).as_posix(), _local(full, max_bytes), full)


def _git_files(root: str, max_bytes: int) -> Iterator[File]:
    """The files git tracks (its index, i.e. HEAD plus staged changes), read from the working tree."""
    try:
        done = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as error:
        raise RuntimeError(f"{root}: `git ls-files` could not run ({error}); is git installed?") from None
    if done.returncode:
        raise RuntimeError(f"{root}: `git ls-files` failed: {done.stderr.decode(errors='replace').strip()}")
    listed = done.stdout
    for relative in sorted(filter(None, listed.decode("utf-8", "surrogateescape").split("\0"))):
        full = os.path.join(root, relative)
        yield File(relative, _local(full, max_bytes), full)


def _distribution_files(dist_info: str, distribution: importlib.metadata.Distribution, max_bytes: int) -> Iterator[File]:
    """The files of an installed distribution's RECORD, relative to its site-packages. Its license files
    (dist-info/licenses/..., dist-info/LICENSE*, COPYING*, NOTICE*) are its repository's: they take the paths they have
    in the source tree (`LICENSE`, not `x.dist-info/licenses/LICENSE`), where the license stage looks; its other
    metadata files are counted as `package_metadata`."""
    site = os.path.dirname(dist_info)
    name = os.path.basename(dist_info)
    for record in sorted({str(f) for f in distribution.files or []}):
        posix = PurePosixPath(record)
        if set(posix.parts) & SKIP_DIRS:  # bytecode
            continue
        full = os.path.join(site, record)
        if record.startswith(".."):  # console scripts installed beside the interpreter
            yield File(record, lambda: (0, "outside_distribution"), os.path.normpath(full))
            continue
        path = record
        if posix.parts[0] == name:
            if len(posix.parts) > 2 and posix.parts[1] == "licenses":
                path = "/".join(posix.parts[2:])
            elif _is_license_name(posix.name):
                path = posix.name
            elif len(posix.parts) == 2 and posix.name == "METADATA":  # core metadata, as an sdist's PKG-INFO holds it
                path = "PKG-INFO"
            else:
                yield File(record, lambda: (0, "package_metadata"), full)
                continue
        yield File(path, _local(full, max_bytes), full)


def _is_license_name(name: str) -> bool:
    return re.match(r"(?i)(licen[cs]e|copying|notice|copyright)", name) is not None


def _archive_files(path: str, max_bytes: int) -> Iterator[File]:
    """Members of a tar or zip archive (local or fsspec), the single top folder of GitHub's archives stripped."""
    with fsspec.open(path, "rb") as handle:
        data = handle.read()
    if data[:2] == b"\x1f\x8b":  # decompressed once: a gzip stream read out of order restarts from its beginning
        data = gzip.decompress(data)
    members: list[tuple[str, object]] = []
    if path.lower().endswith(".zip"):
        archive = zipfile.ZipFile(io.BytesIO(data))
        for info in archive.infolist():
            if not info.is_dir():
                link = (info.external_attr >> 16) & 0o170000 == 0o120000
                name = info.filename.replace("\\", "/")  # some Windows tools write backslashes
                members.append((name, (lambda info=info, link=link: _zip_member(archive, info, link, max_bytes))))
    else:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
        for info in archive.getmembers():
            if not info.isdir():
                members.append((info.name, (lambda info=info: _tar_member(archive, info, max_bytes))))
    tops = {PurePosixPath(name).parts[0] for name, _ in members if len(PurePosixPath(name).parts) > 1}
    strip = len(tops) == 1 and all(len(PurePosixPath(name).parts) > 1 for name, _ in members)
    for name, load in sorted(members, key=lambda member: member[0]):
        parts = PurePosixPath(name).parts[1 if strip else 0 :]
        if not set(parts) & SKIP_DIRS:
            yield File("/".join(parts), load, f"{path}/{name}")


def _zip_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, link: bool, max_bytes: int):
    if link:
        return 0, "not_a_file"
    if info.file_size > max_bytes:
        return info.file_size, "file_too_large"
    return info.file_size, archive.read(info)


def _tar_member(archive: tarfile.TarFile, info: tarfile.TarInfo, max_bytes: int):
    if not info.isfile():
        return 0, "not_a_file"
    if info.size > max_bytes:
        return info.size, "file_too_large"
    return info.size, archive.extractfile(info).read()


def repository_name(path: str) -> str:
    """`parent/name` of a folder or archive (its suffix off), as GitHub names `owner/name`: two inputs called `proj`
    in different folders stay two repositories in their urls, ids and repositories.parquet."""
    parts = [part for part in (path if "://" in path else os.path.abspath(path)).rstrip("/").split("/") if part]
    name = parts[-1]
    for suffix in ARCHIVES:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    parent = parts[-2] if len(parts) > 1 and not parts[-2].endswith(":") else ""  # not `s3:` of `s3://proj.zip`
    return f"{parent}/{name}" if parent else name


class CodeReader:
    def __init__(self, snapshot: str, source: str = "code", max_file_bytes: int = 1_000_000):
        self.snapshot, self.source, self.max_file_bytes = snapshot, source, max_file_bytes

    def files(self, path: str) -> tuple[str, list[File]]:
        """The repository's name and its files, by the kind of input."""
        limit = self.max_file_bytes
        if glob.has_magic(path) and not os.path.exists(path):  # loose files of one folder, e.g. the standard library's modules
            files = [File(os.path.basename(f), _local(f, limit), f) for f in sorted(glob.glob(path)) if os.path.isfile(f)]
            name = repository_name(os.path.dirname(path))
        elif is_archive(path):
            return repository_name(path), list(_archive_files(path, limit))
        elif not os.path.isdir(path):
            raise FileNotFoundError(f"code input {path} is not a repository folder, archive, Parquet file or glob")
        elif path.rstrip("/").endswith(".dist-info"):
            distribution = importlib.metadata.PathDistribution(Path(path))  # its METADATA and RECORD read once
            name = distribution.metadata["Name"] or os.path.basename(path.rstrip("/")).split("-")[0]
            return name, list(_distribution_files(path, distribution, limit))
        elif os.path.exists(os.path.join(path, ".git")):
            return repository_name(path), list(_git_files(path, limit))
        else:
            files, name = list(_walk(path, limit)), repository_name(path)
        root = stdlib_root()
        if Path(path.rstrip("/")).parent == root or Path(path).parent == root:  # a part of the standard library
            files.append(File("LICENSE.txt", _local(str(root / "LICENSE.txt"), limit), str(root / "LICENSE.txt")))
        return name, files

    def read(self, path: str) -> ReadResult:
        if path.lower().endswith(".parquet"):
            from curation.sources.code_parquet import read_stack_parquet

            return read_stack_parquet(path, self.snapshot, self.source, CODE_SCHEMA)
        repository, files = self.files(path)
        result, rows, digest, size = ReadResult(CODE_SCHEMA.empty_table()), [], hashlib.sha256(), 0
        repository = displayable(repository)
        for file in files:
            relative = displayable(file.path)
            if VENDORED.search(relative) or enry.is_vendor(relative):
                result.drop("vendored", file.where, 0)  # not read
                continue
            file_size, data = file.load()
            size += file_size
            if isinstance(data, str):
                result.drop(data, file.where, file_size)
                continue
            digest.update(relative.encode() + b"\0" + data)
            text, reason = decode(data)
            if reason:
                result.drop(reason, file.where, file_size)
                continue
            rows.append({
                "id": hashlib.sha1(f"{repository}/{relative}|{hashlib.sha1(data).hexdigest()}".encode()).hexdigest()[:20],
                "url": f"{repository}/{relative}", "text": text, "source": self.source, "snapshot": self.snapshot,
                "warc_file": repository, "repository": repository, "path": relative,
            })  # fmt: skip
        result.table = pa.Table.from_pylist(rows, schema=CODE_SCHEMA)
        result.sha256, result.bytes_in = digest.hexdigest(), size
        return result
