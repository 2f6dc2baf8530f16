"""The default `rest` corpus: the reference documentation every Python installation ships, as `.txt` files.

Real prose that exists offline anywhere the package is installed: the Language and Library Reference sections that
`help()` shows (`pydoc_data.topics`) and the module docstrings of the standard library, read from the source with
`ast` (never imported). Written once per Python version, deterministically, a few shards so Ray has parallel work.
"""

import ast
import platform
import shutil
import sysconfig
from pathlib import Path

from pydoc_data.topics import topics

DEFAULT_ROOT = Path("runs/python-docs")
SHARDS = 4
TEST_DIRS = {"test", "tests", "idle_test"}
# not the standard library's own modules (an interpreter's installed packages live inside its stdlib folder)
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", "site-packages", "dist-packages", ".venv", "venv", ".tox"}


def module_docstrings() -> dict[str, str]:
    """Module name -> docstring of every standard library module that has one, tests excluded."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = {}
    for file in sorted(root.rglob("*.py")):
        parts = file.relative_to(root).with_suffix("").parts
        if SKIP_DIRS.union(TEST_DIRS).intersection(parts):
            continue
        try:
            docstring = ast.get_docstring(ast.parse(file.read_bytes()))
        except (SyntaxError, ValueError, OSError):  # a deliberately broken test-data file, an unreadable one
            continue
        if docstring:
            found[".".join(parts).removesuffix(".__init__")] = docstring
    return found


def documents() -> dict[str, str]:
    """File name -> text, in a fixed order."""
    docs = {f"topic-{name}.txt": text for name, text in sorted(topics.items())}
    docs.update({f"module-{name}.txt": text + "\n" for name, text in module_docstrings().items()})
    return docs


def ensure(root: str | Path = DEFAULT_ROOT) -> list[str]:
    """The shard folders for this Python version, written when missing (atomically: a killed write is redone)."""
    folder = Path(root) / platform.python_version()
    paths = [folder / f"shard-{n:02d}" for n in range(SHARDS)]
    if not all(p.is_dir() for p in paths):
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        for index, (name, text) in enumerate(documents().items()):
            shard = partial / paths[index % SHARDS].name
            shard.mkdir(parents=True, exist_ok=True)
            (shard / name).write_text(text, encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)
    return [str(p.resolve()) for p in paths]
