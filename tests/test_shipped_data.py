"""What the package ships besides code: every data file has its origin and licence listed, and the project's own
licence is declared in pyproject.toml and is the text its LICENSE holds."""

import re
from pathlib import Path

from filters.license import detect
from filters.license_match import matcher

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "filters" / "assets"
NOT_DATA = re.compile(r"^(?:README\.md|LICENSE.*|NOTICE|MODEL\.md)$")  # the listing itself, licence texts, model cards


def listed() -> list[tuple[re.Pattern, str, str]]:
    """(file pattern, origin, licence) per file named in the README's table (`badwords/<lang>` stands for many)."""
    rows = []
    for line in (ASSETS / "README.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 4 or cells[0] == "file" or set(cells[0]) <= set("-"):
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            rows.append((re.compile(re.escape(name).replace("<lang>", "[^/]+") + "$"), cells[1], cells[2]))
    return rows


def test_every_shipped_data_file_names_its_origin_and_licence():
    rows = listed()
    files = [path.relative_to(ASSETS).as_posix() for path in sorted(ASSETS.rglob("*")) if path.is_file() and not NOT_DATA.match(path.name)]
    unlisted = [name for name in files if not any(pattern.match(name) and origin and licence for pattern, origin, licence in rows)]
    assert not unlisted, f"{unlisted}: add each to filters/assets/README.md with where it came from and its licence"
    stale = [pattern.pattern for pattern, _, _ in rows if not any(pattern.match(name) for name in files)]
    assert not stale, f"filters/assets/README.md lists {stale}, which are not shipped"
    assert len(files) > 30 and len(rows) >= 9


def test_the_projects_licence_is_declared_and_is_its_license_file():
    declared = re.search(r'^license = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert declared and declared.group(1) == "Apache-2.0"
    found = detect(matcher(), ["LICENSE"], [(ROOT / "LICENSE").read_text()])
    assert (found.license, found.source) == ("Apache-2.0", "license_file")
