"""Every relative link in README.md and docs/ resolves: the file exists, and a `#heading` is a heading of that file
(as GitHub makes anchors). Links in code blocks and inline code are not links."""

import re
from functools import cache
from pathlib import Path

import pytest

from experiments.reference import github_anchor

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md"]
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


@cache
def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, characters other than letters, digits, spaces, - and _ dropped, spaces
    to -, a repeated anchor numbered -1, -2, ..."""
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text())):
        slug = github_anchor(heading)
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


def links(page: Path) -> list[str]:
    text = _INLINE_CODE.sub("", _FENCE.sub("", page.read_text()))
    return [target for target in _LINK.findall(text) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no such heading in {resolved.relative_to(ROOT)}")
    assert broken == []


def test_anchors_are_made_as_github_makes_them(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Curate\n## On a Ray cluster\n## `curate run`: the funnel (2026-12-06)\n## Curate\n```\n# not a heading\n```\n")
    assert anchors(page) == {"curate", "on-a-ray-cluster", "curate-run-the-funnel-2026-12-06", "curate-1"}


def section(page: Path, anchor: str) -> str:
    """The text under the heading whose anchor is `anchor`, up to the next heading of the same or a higher level."""
    text = page.read_text()
    for match in re.finditer(r"^(#{1,6})\s+(.+?)\s*$", text, re.MULTILINE):
        if github_anchor(match.group(2)) == anchor:
            level = len(match.group(1))
            end = re.search(rf"^#{{1,{level}}}\s", text[match.end() :], re.MULTILINE)
            return text[match.end() : match.end() + end.start() if end else len(text)]
    raise AssertionError(f"no heading #{anchor} in {page}")


@pytest.mark.parametrize(
    "target, words",
    [
        ("docs/curating.md#on-a-ray-cluster", ["--ray-address", "s3://"]),
        ("docs/reference/stages.md#quality", ["`top_fraction`", "keep this best-scoring fraction"]),
        ("docs/training.md#how-many-gpus-does-a-7b-model-need", ["train plan", "7b"]),
        ("docs/deciding.md#how-do-i-compare-two-recipes-curate-ablate", ["curate ablate", "--variant"]),
    ],
)
def test_the_readme_links_straight_to_the_answer_of_a_common_question(target, words):
    """"How do I run fineweb-snapshot on my Ray cluster on S3 input", "what does the quality stage's `top_fraction`
    do", "how many GPUs does a 7B model need", "how do I compare two recipes": one click from the README."""
    assert f"]({target})" in (ROOT / "README.md").read_text()
    path, _, anchor = target.partition("#")
    text = section(ROOT / path, anchor)
    assert all(word in text for word in words), (target, [word for word in words if word not in text])
