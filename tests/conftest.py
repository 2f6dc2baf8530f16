import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SHARED_DATA", ROOT.parent / "shared" / "data")).resolve()


def shared(relative: str) -> Path:
    """A file of ../shared/data, or a skip naming what is missing (a user's clone has no shared/)."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"{path} is absent: real-data tests need ../shared/data (see its README)")
    return path


@pytest.fixture(scope="session")
def sample_snapshot(tmp_path_factory) -> Path:
    """A small built-in sample snapshot shared by the tests: 160 pages in 4 WARC files."""
    from curation.sources import sample

    out = tmp_path_factory.mktemp("sample")
    sample.generate(out, pages=160, files=4, seed=0)
    return out
