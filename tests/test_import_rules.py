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
