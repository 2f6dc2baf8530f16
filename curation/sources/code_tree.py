"""Source files of repositories as documents: one shard per repository (a directory), one document per file.

The default corpus is the Python installation's own standard library, which every machine has: one shard per
top-level package and one for the loose modules. A file becomes a document with `source: code`, its programming
`language` from the extension, its `repository` and its path inside it as `url`; what cannot be one is counted
(`binary_file`, `undecodable`, `file_too_large`, `not_code`, `not_a_file`, `unreadable`), never silently skipped.
"""

import glob
import hashlib
import os
import sysconfig
from collections import Counter
from pathlib import Path

import pyarrow as pa

from curation.schema import DOCUMENT_FIELDS
from curation.sources.local_files import decode, load_file
from curation.sources import ReadResult

LANGUAGES = {
    ".py": "python", ".pyi": "python", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp",
    ".java": "java", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript", ".go": "go", ".rs": "rust",
    ".rb": "ruby", ".sh": "shell", ".bash": "shell", ".ps1": "powershell", ".bat": "batch", ".pl": "perl",
    ".php": "php", ".swift": "swift", ".kt": "kotlin", ".scala": "scala", ".lua": "lua", ".r": "r", ".sql": "sql",
    ".html": "html", ".css": "css", ".tcl": "tcl", ".m": "objective-c", ".cs": "csharp", ".f90": "fortran",
    ".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".xml": "xml", ".csv": "csv", ".txt": "text",
    ".md": "markdown", ".rst": "restructuredtext", ".cfg": "ini", ".ini": "ini",
}  # fmt: skip
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", "site-packages", "dist-packages", ".venv", "venv", ".tox"}
CODE_SCHEMA = pa.schema(DOCUMENT_FIELDS + [pa.field("language", pa.string()), pa.field("repository", pa.string())])


def stdlib_inputs() -> list[str]:
    """The standard library as shards: each top-level package directory, and its loose modules as one glob."""
    root = Path(sysconfig.get_paths()["stdlib"])
    packages = sorted(str(p) for p in root.iterdir() if p.is_dir() and p.name not in SKIP_DIRS and not p.name.startswith("."))
    return [str(root / "*.py")] + packages


class CodeReader:
    def __init__(self, snapshot: str, source: str = "code", max_file_bytes: int = 1_000_000):
        self.snapshot, self.source, self.max_file_bytes = snapshot, source, max_file_bytes

    def _files(self, path: str) -> tuple[str, list[str]]:
        """The repository name and its files: a directory walked recursively, or the files a glob matches."""
        if glob.has_magic(path):
            files = sorted(f for f in glob.glob(path) if os.path.isfile(f))
            return os.path.basename(os.path.dirname(path)) or path, files
        if not os.path.isdir(path):
            raise FileNotFoundError(f"code input {path} is neither a directory nor a glob of files")
        files = []
        for folder, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
            files += [os.path.join(folder, name) for name in sorted(names)]
        return os.path.basename(os.path.normpath(path)), files

    def read(self, path: str) -> ReadResult:
        repository, files = self._files(path)
        base = os.path.dirname(path) if glob.has_magic(path) else path
        dropped, rows, digest, size = Counter(), [], hashlib.sha256(), 0
        for file in files:
            language = LANGUAGES.get(Path(file).suffix.lower())
            if language is None:
                dropped["not_code"] += 1
                continue
            file_size, data = load_file(file, self.max_file_bytes)
            size += file_size
            if isinstance(data, str):
                dropped[data] += 1
                continue
            digest.update(data)
            text, reason = decode(data)
            if reason:
                dropped[reason] += 1
                continue
            relative = os.path.relpath(file, base)
            rows.append({
                "id": hashlib.sha1(f"{repository}/{relative}|{hashlib.sha1(data).hexdigest()}".encode()).hexdigest()[:20],
                "url": f"{repository}/{relative}", "text": text, "source": self.source, "snapshot": self.snapshot,
                "warc_file": repository, "language": language, "repository": repository,
            })  # fmt: skip
        return ReadResult(pa.Table.from_pylist(rows, schema=CODE_SCHEMA), dropped, digest.hexdigest(), size)
