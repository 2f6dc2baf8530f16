"""The licence texts the detector matches against (ScanCode's LicenseDB as `licensedcode-data` installs it, read from
folders laid out as that package lays them out) and the shingle index over them, built, cached and loaded."""

import numpy as np
import pytest

from filters import license_index
from filters.license_database import ExceptionText, LicenseText, database_texts, licensedb_folder, rule_texts
from filters.license_index import LicenseIndex, default_index
from filters.license_match import LicenseMatcher, matcher

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo "
         "sierra tango uniform victor whiskey xray yankee zulu").split()  # fmt: skip


def prose(seed: int, words: int = 60) -> str:
    """Words no real licence has, in an order fixed by the seed: texts that share no shingle by chance."""
    rng = np.random.default_rng(seed)
    return " ".join(f"{WORDS[i]}{seed}" for i in rng.integers(0, len(WORDS), words))


def licence_file(folder, key: str, text: str, **fields: str) -> None:
    head = "".join(f"{name}: {value}\n" for name, value in {"key": key, **fields}.items())
    (folder / f"{key}.LICENSE").write_text(f"---\n{head}---\n\n{text}\n")


def rule_file(folder, name: str, text: str, **fields: str) -> None:
    head = "".join(f"{field}: {value}\n" for field, value in fields.items())
    (folder / f"{name}.RULE").write_text(f"---\n{head}---\n\n{text}\n")


@pytest.fixture
def licensedb(tmp_path):
    """A LicenseDB in the package's layout: licensedcode/data/{licenses,rules}."""
    licenses, rules = tmp_path / "licenses", tmp_path / "rules"
    licenses.mkdir()
    rules.mkdir()
    licence_file(licenses, "mit", prose(1), spdx_license_key="MIT")
    licence_file(licenses, "gpl-2.0", prose(2), spdx_license_key="GPL-2.0-only")
    licence_file(licenses, "gpl-2.0-plus", "or any later version " + prose(2), spdx_license_key="GPL-2.0-or-later")
    licence_file(licenses, "gfdl-1.1-plus", prose(3), spdx_license_key="GFDL-1.1-or-later")  # no -only beside it
    licence_file(licenses, "acme-proprietary", prose(4), spdx_license_key="LicenseRef-scancode-acme")
    licence_file(licenses, "classpath-exception-2.0", prose(5), spdx_license_key="Classpath-exception-2.0", is_exception="yes")
    licence_file(licenses, "old-mit", prose(6), spdx_license_key="MIT-old", is_deprecated="yes")
    rule_file(rules, "mit_12", prose(7), license_expression="mit", is_license_text="yes")
    rule_file(rules, "mit_13", prose(8), license_expression="mit", is_license_text="yes", relevance="90")
    rule_file(rules, "mit_14", prose(9), license_expression="mit", is_license_notice="yes")
    rule_file(rules, "mit_or_gpl", prose(10), license_expression="mit OR gpl-2.0", is_license_text="yes")
    rule_file(rules, "acme_1", prose(11), license_expression="acme-proprietary", is_license_text="yes")
    return licenses


def test_the_licensedb_gives_each_licence_under_its_spdx_id_and_gnu_ones_under_their_version(licensedb):
    assert sorted(spdx for spdx, _ in database_texts(licensedb)) == ["GFDL-1.1-or-later", "GPL-2.0", "MIT"]
    assert [(spdx, text.strip()) for spdx, text in rule_texts(licensedb)] == [("MIT", prose(7))]  # full-text rules of one licence with an SPDX id, at relevance 100


def test_the_installed_licensedb_is_found_and_large():
    texts = database_texts(licensedb_folder())
    ids = {spdx for spdx, _ in texts}
    assert len(texts) > 500 and {"OFL-1.1", "CC-BY-SA-3.0", "GFDL-1.2", "GPL-1.0", "CECILL-2.0", "Apache-2.0"} <= ids
    assert not any(spdx.startswith("LicenseRef-") or spdx.endswith("-only") for spdx in ids)


def test_near_identical_variants_are_left_out_and_an_incorporated_text_is_not_an_and():
    short, long_ = prose(20), prose(21, 200)
    texts = [
        LicenseText("SHORT", short, False),
        LicenseText("SHORT", short + " " + prose(22, 2), True),  # the same text with two words more: adds nothing
        LicenseText("SHORT", short[: len(short) // 2], True),  # half of it: a variant kept
        LicenseText("LONG", long_ + "\n\n" + short, False),  # carries SHORT's whole text
        LicenseText("TINY", prose(23, 10), False),  # shorter than MIN_TEXT_SHINGLES: a notice, not a full text
    ]
    index = LicenseIndex.build(texts)
    assert index.spdx == ["SHORT", "SHORT", "LONG"]
    assert index.incorporates == {2: {0}}
    found = LicenseMatcher(index)
    assert [m.spdx for m in found.full_texts(long_ + "\n\n" + short)[0]] == ["LONG"]
    assert [m.spdx for m in found.full_texts(short)[0]] == ["SHORT"]
    assert [m.spdx for m in found.full_texts(prose(30) + "\n" + short)[0]] == ["SHORT"]


def test_an_exception_is_indexed_by_the_words_no_licence_has():
    """Many exceptions restate the licence's notice before their own words: indexed by their own words only, the
    licence's text alone is never the exception, and the two together are both."""
    licence, own = prose(60, 300), prose(61, 60)
    index = LicenseIndex.build([LicenseText("LIC", licence, False)], exceptions=[
        ExceptionText("Own-exception", licence[:400] + " " + own, False), ExceptionText("Echo-exception", licence[:600], False)])  # fmt: skip
    assert index.spdx == ["LIC", "Own-exception"] and index.exceptions == {"Own-exception": False}  # Echo: no words of its own
    found = LicenseMatcher(index)
    assert [m.spdx for m in found.full_texts(licence)[0]] == ["LIC"]
    assert [m.spdx for m in found.full_texts(licence + "\n\n" + own)[0]] == ["LIC", "Own-exception"]


def test_the_index_is_cached_and_a_damaged_cache_is_rebuilt(tmp_path, monkeypatch):
    texts = (LicenseText("AAA", prose(40), False), LicenseText("BBB", prose(41), False))
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path))
    monkeypatch.setattr(license_index, "license_texts", lambda: texts)
    monkeypatch.setattr(license_index, "exception_texts", lambda: (ExceptionText("EXC-exception", prose(40) + " " + prose(42), False),))
    build = default_index.__wrapped__  # the per-process memo left out
    path = tmp_path / "license_index" / license_index.cache_key() / license_index.INDEX_FILE
    assert not path.exists()
    first = build()
    assert path.exists()
    loaded = build()
    assert loaded.spdx == first.spdx and loaded.vocabulary == first.vocabulary
    assert loaded.permissive == first.permissive and {"MIT", "IJG"} <= loaded.permissive
    assert loaded.exceptions == first.exceptions == {"EXC-exception": False}
    assert np.array_equal(loaded.postings.keys, first.postings.keys) and np.array_equal(loaded.sizes, first.sizes)
    assert [m.spdx for m in LicenseMatcher(loaded).full_texts(prose(41))[0]] == ["BBB"]
    path.write_bytes(b"not an npz")
    assert build().spdx == ["AAA", "BBB", "EXC-exception"] and not path.exists()  # built in the process, the damaged entry removed
    assert build().spdx == ["AAA", "BBB", "EXC-exception"] and path.exists()  # and cached again by the next


def test_an_unwritable_cache_folder_only_costs_the_build(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache folder would go
    monkeypatch.setenv("CURATE_CACHE", str(blocked))
    monkeypatch.setattr(license_index, "license_texts", lambda: (LicenseText("AAA", prose(50), False),))
    monkeypatch.setattr(license_index, "exception_texts", lambda: ())
    assert default_index.__wrapped__().spdx == ["AAA"]


def test_the_shipped_index_knows_what_the_63_spdx_texts_did_not():
    index = matcher().index
    assert {"OFL-1.1", "CC-BY-SA-3.0", "GFDL-1.2", "Artistic-1.0-Perl"} <= set(index.spdx)
