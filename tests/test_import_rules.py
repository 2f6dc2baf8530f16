"""Data flows one way: filters know nothing of the rest, curation and training never import each other, and only
`experiments` (above both) joins them. Checked on every import statement of the sources, lazy ones included."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "filters": {"curation", "training", "experiments"},
    "shard_contract": {"filters", "curation", "training", "experiments"},
    "curation": {"training", "experiments"},
    "training": {"curation", "filters", "experiments"},
}


def imported_packages(path: Path) -> set[str]:
    packages = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            packages |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            packages.add(node.module.split(".")[0])
    return packages


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_nothing_from_those_above_or_beside_it(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources found for {package}"
    wrong = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package]) for path in files}
    assert {path: names for path, names in wrong.items() if names} == {}


def test_the_rule_sees_lazy_imports(tmp_path):
    source = tmp_path / "lazy.py"
    source.write_text("def f():\n    from training import plots\n    import experiments.ladder\n")
    assert imported_packages(source) == {"training", "experiments"}


PACKAGES = ("curation", "filters", "training", "experiments", "shard_contract")


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, modules: set[str]) -> set[str]:
    """The project's modules a source imports, lazy imports included (a circle through a function still means neither
    module can be understood, moved or tested without the other): `from a import b` is a.b when that is a module."""
    found = set()

    def add(name: str) -> None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            found.add(name)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                add(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module)
    return found


def import_graph(root: Path, packages) -> dict[str, set[str]]:
    paths = {module_name(path, root): path for package in packages for path in sorted((root / package).rglob("*.py"))}
    return {name: imported_modules(path.read_text(), set(paths)) - {name} for name, path in paths.items()}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for child in graph[todo.pop()] - seen:
            seen.add(child)
            todo.append(child)
    return seen


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import one another, through any chain of imports, as one sorted list."""
    reaches = {name: reachable(graph, name) for name in graph}
    circles = {tuple(sorted(name for name in reaches[start] if start in reaches[name]))
               for start in graph if start in reaches[start]}  # fmt: skip
    return sorted(list(circle) for circle in circles)


def test_no_import_circle_among_the_project_modules():
    graph = import_graph(ROOT, PACKAGES)
    assert len(graph) > 100, "the sources were not found"
    assert import_cycles(graph) == []


def test_the_cycle_rule_sees_a_circle_through_a_lazy_import(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    sources = {"__init__": "", "low": "import os\n", "a": "from pkg import b, low\n",
               "b": "def f():\n    from pkg.c import g\n", "c": "import pkg.a\nimport pkg.low\n"}  # fmt: skip
    for name, text in sources.items():
        (package / f"{name}.py").write_text(text)
    assert import_cycles(import_graph(tmp_path, ["pkg"])) == [["pkg.a", "pkg.b", "pkg.c"]]
