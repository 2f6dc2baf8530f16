"""The license stage: per-repository detection (license files, README, headers, metadata), the policy, unknown and
conflicting counted apart, and the repositories report. The license texts here are written for these tests; the
accuracy on real files is benchmarks/license_detection.py, checked here only on a few installed packages."""

import json
import sysconfig
from email.parser import HeaderParser
from pathlib import Path

import pyarrow as pa
import pytest

from curation.recipe import RecipeError, parse_recipe
from filters import STAGES
from filters.license import LicenseFilter, LicenseParams, detect, expression_allowed
from filters.license_database import exception_texts
from filters.license_declared import declared_license, spdx_expression
from filters.license_match import bsd_by_clauses, matcher

MIT = """MIT License

Copyright (c) 2031 Ada Example

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated
documentation files (the "Software"), to deal in the Software without restriction, including without limitation the
rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and to permit
persons to whom the Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or substantial portions of the
Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE
WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR
COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""
MIT_CONDITION = (
    ", subject to the following conditions:\n\nThe above copyright notice and this permission notice shall be included "
    "in all copies or substantial portions of the\nSoftware."
)
MIT_0 = MIT.replace("MIT License", "MIT No Attribution").replace(MIT_CONDITION, ".")
BSD_3 = """Copyright (c) 2031, Example Org
All rights reserved.

Redistribution and use in source and binary forms, with or without modification, are permitted provided that the
following conditions are met:

1. Redistributions of source code must retain the above copyright notice, this list of conditions and the following
   disclaimer.

2. Redistributions in binary form must reproduce the above copyright notice, this list of conditions and the following
   disclaimer in the documentation and/or other materials provided with the distribution.

3. Neither the name of the copyright holder nor the names of its contributors may be used to endorse or promote
   products derived from this software without specific prior written permission.

THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND ANY EXPRESS OR IMPLIED WARRANTIES,
INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL,
SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY,
WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
"""
BSD_2 = BSD_3[: BSD_3.index("3. Neither")] + BSD_3[BSD_3.index("THIS SOFTWARE") :]
GPL_NOTICE = """# This program is free software: you can redistribute it and/or modify it under the terms of the GNU General
# Public License as published by the Free Software Foundation, either version {v} of the License, or (at your
# option) any later version.
"""
APACHE_NOTICE = 'Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except\n'
CODE = "def main():\n    return 42\n"
ROOT = Path(__file__).resolve().parents[1]


def table(files: dict[str, dict[str, str]], **extra: list) -> pa.Table:
    """Rows of the document contract from {repository: {path: text}}."""
    rows = [(repo, path, text) for repo, tree in files.items() for path, text in tree.items()]
    columns = {
        "id": [f"{repo}/{path}" for repo, path, _ in rows], "url": [f"{repo}/{path}" for repo, path, _ in rows],
        "text": [text for _, _, text in rows], "source": ["code"] * len(rows), "repository": [repo for repo, _, _ in rows],
        "path": [path for _, path, _ in rows], "language": ["Python" if path.endswith(".py") else "Text" for _, path, _ in rows],
    }  # fmt: skip
    return pa.table({**columns, **extra})


def licenses_of(result) -> dict[str, str | None]:
    return dict(zip(result.kept["repository"].to_pylist(), result.kept["license"].to_pylist()))


def detected(tree: dict[str, str]):
    return detect(matcher(), list(tree), list(tree.values()))


@pytest.mark.parametrize(
    "tree, expected",
    [
        ({"LICENSE": MIT}, "MIT"),
        ({"LICENSE.md": MIT_0}, "MIT-0"),
        ({"COPYING": BSD_3}, "BSD-3-Clause"),
        ({"LICENCE.txt": BSD_2}, "BSD-2-Clause"),
        ({"LICENSE": "Apache-2.0\n"}, "Apache-2.0"),
        ({"COPYING": GPL_NOTICE.format(v=3)}, "GPL-3.0-or-later"),
        ({"COPYING": GPL_NOTICE.format(v=2)}, "GPL-2.0-or-later"),
        ({"COPYING": GPL_NOTICE.format(v=3).replace("General\n# Public", "Lesser General Public")}, "LGPL-3.0-or-later"),
        ({"LICENSE": "This program is under the GNU Affero General Public License version 3.\n"}, "AGPL-3.0-only"),
        ({"README.md": f"# tool\n\nDoes things.\n\n## License\n\n{APACHE_NOTICE}\n## Credits\n\nMIT License fans.\n"}, "Apache-2.0"),
    ],
)
def test_one_license_and_its_near_neighbours(tree, expected):
    """BSD-2 vs BSD-3, MIT vs MIT-0, GPL vs LGPL vs AGPL and their versions; a README is read in its License
    section only (the credits' "MIT License" is not the repository's)."""
    assert detected(tree).license == expected


def test_two_licenses_are_and_unless_a_text_offers_the_choice():
    assert detected({"LICENSE": MIT + "\n\n" + BSD_3}).license == "BSD-3-Clause AND MIT"
    assert detected({"LICENSE-MIT": MIT, "LICENSE-BSD": BSD_3}).license == "BSD-3-Clause AND MIT"
    choice = "This project is dual licensed under the MIT license or the BSD-3-Clause license.\n\n"
    assert detected({"LICENSE": choice + MIT + "\n\n" + BSD_3}).license == "BSD-3-Clause OR MIT"
    readme = "# lib\n\n## License\n\nLicensed under either of LICENSE-MIT or LICENSE-BSD at your option.\n"
    found = detected({"LICENSE-MIT": MIT, "LICENSE-BSD": BSD_3, "README.md": readme})
    assert (found.license, found.source) == ("BSD-3-Clause OR MIT", "license_file")
    assert "LICENSE-MIT: MIT" in found.evidence and "LICENSE-BSD: BSD-3-Clause" in found.evidence


def test_licenses_of_bundled_software_are_not_the_repositorys():
    bundled = "\n----\n\nThis binary distribution of Lib also bundles the following software:\n\nName: runtime\n\n"
    assert detected({"LICENSE.txt": BSD_3 + bundled + GPL_NOTICE.format(v=3)}).license == "BSD-3-Clause"
    notices = "\nThird-party software notices\n\n"
    assert detected({"LICENSE": MIT + notices + BSD_3}).license == "MIT"
    assert detected({"LICENSE": bundled + MIT}).license == "MIT"  # nothing before the turn: the whole file counts


def test_header_identifiers_when_there_is_no_license_file():
    found = detected({"src/a.rs": "// SPDX-License-Identifier: mit OR apache-2.0\n" + CODE, "src/b.py": CODE})
    assert (found.license, found.source) == ("MIT OR Apache-2.0", "header")
    found = detected({"a.py": "# SPDX-License-Identifier: MIT\n" + CODE, "b.c": "/* SPDX-License-Identifier: BSD-3-Clause */\n"})
    assert found.license == "BSD-3-Clause AND MIT"
    assert detected({"lib/LICENSE": MIT, "a.py": CODE}).source == "unknown"  # a vendored folder's license is not the repository's


def test_policy_permissive_any_and_an_explicit_list():
    files = {"mit": {"LICENSE": MIT, "a.py": CODE}, "gpl": {"COPYING": GPL_NOTICE.format(v=3), "a.py": CODE, "b.py": CODE}}
    permissive = LicenseFilter().process(table(files))
    assert licenses_of(permissive) == {"mit": "MIT"} and permissive.dropped == {"license/not_allowed": 3}
    assert licenses_of(LicenseFilter(LicenseParams(allow="any")).process(table(files))) == {"mit": "MIT", "gpl": "GPL-3.0-or-later"}
    listed = LicenseFilter(LicenseParams(allow=["GPL-3.0-or-later"])).process(table(files))
    assert licenses_of(listed) == {"gpl": "GPL-3.0-or-later"} and listed.dropped == {"license/not_allowed": 2}
    assert expression_allowed("GPL-3.0-only OR MIT", {"MIT"}) and not expression_allowed("GPL-3.0-only AND MIT", {"MIT"})
    policy = LicenseFilter()  # permissive: the named list and what ScanCode's LicenseDB files as Permissive or Public Domain
    assert policy.allowed("FTL AND IJG AND MIT") and policy.allowed("Artistic-2.0") and not policy.allowed("MPL-2.0 AND MIT")
    assert licenses_of(LicenseFilter(LicenseParams(allow=["mit"])).process(table(files))) == {"mit": "MIT"}  # ids as SPDX spells them
    with pytest.raises(ValueError, match="'MTI'"):
        LicenseParams(allow=["MIT", "MTI"])


BSD_CONDITIONS = """Redistribution and use in source and binary forms, with or without modification, are permitted provided
that the following conditions are met:
1. Redistributions of source code must retain the above copyright notice, this list of conditions and the following
   disclaimer.
2. Redistributions in binary form must reproduce the above copyright notice, this list of conditions and the following
   disclaimer in the documentation and/or other materials provided with the distribution.
"""
BSD_ADVERTISING = """3. All advertising materials mentioning features or use of this software must display the following
   acknowledgement: This product includes software developed by the NetBSD Foundation, Inc. and its contributors.
"""
BSD_ENDORSEMENT = """4. Neither the name of The NetBSD Foundation nor the names of its contributors may be used to endorse or promote
   products derived from this software without specific prior written permission.
"""
BSD_DISCLAIMER = """THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND ANY EXPRESS OR IMPLIED
WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE
ARE DISCLAIMED. IN NO EVENT SHALL THE {who} OR CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL,
EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES; LOSS OF
USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT,
STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS SOFTWARE, EVEN
IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
"""


@pytest.mark.parametrize("clauses, who, expected", [
    (BSD_ADVERTISING + BSD_ENDORSEMENT, "FOUNDATION", "BSD-4-Clause"),  # NetBSD's; ScanCode 32.5 agrees on all five
    (BSD_ENDORSEMENT, "FOUNDATION", "BSD-3-Clause"),
    ("", "REGENTS", "BSD-2-Clause"),  # jusText's LICENSE: two clauses in the regents' disclaimer (its metadata: BSD 2-Clause)
    ("", "COPYRIGHT HOLDER", "BSD-2-Clause"),
    (BSD_ENDORSEMENT, "REGENTS", "BSD-3-Clause"),
])  # fmt: skip
def test_bsd_licences_are_named_by_their_clauses_not_their_disclaimers_wording(clauses, who, expected):
    text = "Copyright (c) 1998 The NetBSD Foundation, Inc.\nAll rights reserved.\n\n" + BSD_CONDITIONS + clauses + "\n" + BSD_DISCLAIMER.format(who=who)
    assert detected({"LICENSE": text, "a.c": CODE}).license == expected
    assert bsd_by_clauses("BSD-2-Clause", text) == expected  # whichever of the three the shingles chose
    assert bsd_by_clauses("BSD-3-Clause-Clear", text) == "BSD-3-Clause-Clear"  # a named variant is its own words


def test_a_licence_with_an_extra_clause_is_never_the_smaller_licence():
    """Per SPDX's matching guidelines a licence matches when nothing substantive is left over: an exception beside a
    licence's text is named WITH it (it adds a permission), an added restriction is AND (the Commons Clause, which
    ScanCode names commons-clause), and MIT with the JSON licence's "Good, not Evil" line is the JSON licence.
    ScanCode 32.5 on the same files: the Commons Clause the same; LLVM-exception with AND, not WITH; the Classpath
    exception with a Linux-syscall-note the text does not hold; the Good-not-Evil MIT as plain MIT."""
    extra = {exception.spdx: exception.text for exception in exception_texts()}
    gpl_2 = json.loads((ROOT / "filters/assets/licenses/texts.json").read_text())["licenses"]["GPL-2.0"]["text"]
    apache = (ROOT / "LICENSE").read_text()
    cases = {
        "commons": (apache + "\n\n" + extra["LicenseRef-scancode-commons-clause"], "Apache-2.0 AND LicenseRef-scancode-commons-clause", False),
        "classpath": (gpl_2 + "\n\n" + extra["Classpath-exception-2.0"], "GPL-2.0-only WITH Classpath-exception-2.0", False),
        "llvm": (apache + "\n\n" + extra["LLVM-exception"], "Apache-2.0 WITH LLVM-exception", True),
        "evil": (MIT.replace("The above copyright", "The Software shall be used for Good, not Evil.\n\nThe above copyright"), "JSON", False),
        "plain": (gpl_2, "GPL-2.0-only", False),  # the licence alone: no exception read into it
        "non-commercial": (MIT + "\nThis software may be used for non-commercial purposes only.\n",
                           "LicenseRef-pretrain-stack-unknown-restriction AND MIT", False),  # no licence has these words
    }  # fmt: skip
    for name, (text, expression, permissive) in cases.items():
        found = detected({"LICENSE": text})
        assert found.license == expression and LicenseFilter().allowed(found.license) is permissive, name
    assert 'left over: "this software may be used for non commercial purposes only"' in detected({"LICENSE": cases["non-commercial"][0]}).evidence


def test_every_licence_a_file_names_with_its_operator():
    """tld's LICENSE.rst offers three licences at the user's option (its metadata: MPL-1.1 OR GPL-2.0-only OR
    LGPL-2.1-or-later; the LGPL's notice naming the GPL no longer hides the GPL where a choice is offered); regex's
    LICENSE.txt is Apache-2.0's text after a preamble saying the code it derives from is under CNRI's Python licence,
    on a copyright line (its metadata: Apache-2.0 AND CNRI-Python). ScanCode 32.5: regex's the same licences, tld's
    with AND, not the choice the file offers."""
    tld = ("`tld` is licensed under the\n`GPL 2.0 <LICENSE_GPL2.0.txt>`_\nor the\n`LGPL 2.1 <LICENSE_LGPL_2.1.txt>`_\nor the\n"
           "`MPL 1.1 <LICENSE_MPL_1.1.txt>`_,\nat your option.\n")  # fmt: skip
    assert detected({"LICENSE.rst": tld}).license == "GPL-2.0-only OR LGPL-2.1-only OR MPL-1.1"
    regex = ("This work was derived from the 're' module of CPython 2.6 and CPython 3.1,\ncopyright (c) 1998-2001 by Secret "
             "Labs AB and licensed under CNRI's Python 1.6\nlicense.\n\nAll additions and alterations are licensed under the "
             "Apache 2.0 License.\n\n" + (ROOT / "LICENSE").read_text())  # fmt: skip
    assert detected({"LICENSE.txt": regex}).license == "Apache-2.0 AND CNRI-Python"
    lgpl = "This library is free software; you can redistribute it under the terms of the GNU Lesser General Public License version 2.1"
    assert detected({"a.c": f"/* {lgpl} */\n" + CODE}).license == "LGPL-2.1-only"  # no choice offered: the GPL it names is not a second licence


@pytest.mark.parametrize("expression, permissive", [
    ("Apache-2.0 WITH LLVM-exception", True),  # an exception adds a permission: Apache-2.0's rule holds
    ("GPL-2.0-only WITH Classpath-exception-2.0", False),  # ... and leaves GPL-2.0 what it was
    ("MIT OR (GPL-2.0-only AND BSD-3-Clause)", True),  # OR: one branch allowed suffices
    ("(MIT OR GPL-3.0-only) AND Apache-2.0", True),  # AND: every part, each OR within it by its own rule
    ("(MPL-2.0 OR GPL-3.0-only) AND MIT", False),
    ("MIT AND (Apache-2.0 WITH LLVM-exception OR GPL-3.0-only)", True),
    ("JSON", False),  # "shall be used for Good, not Evil": a field-of-use restriction, though the LicenseDB says Permissive
    ("BSD-4-Clause", False), ("OpenSSL", False), ("Apache-1.0", False),  # the advertising clause
    ("HPND", True), ("MIT-CMU", True),  # "not be used in advertising or publicity": an endorsement clause, no obligation
    ("IJG AND FTL", True),  # permissive by the LicenseDB's category, no restriction in their texts
    ("MIT AND", False),  # not an expression
])  # fmt: skip
def test_permissive_policy_parses_expressions_and_refuses_advertising_and_field_of_use_clauses(expression, permissive):
    assert LicenseFilter().allowed(expression) is permissive


def test_permissive_listed_is_the_named_list_alone():
    listed = LicenseFilter(LicenseParams(allow="permissive-listed"))
    assert listed.allowed("MIT OR IJG") and not listed.allowed("IJG") and LicenseFilter().allowed("IJG")


def test_unknown_and_conflicting_are_counted_apart_and_kept_only_when_asked():
    conflicting_readme = "# app\n\n## License\n\nThis project is licensed under the GNU General Public License v3.\n"
    files = {
        "none": {"a.py": CODE}, "clash": {"LICENSE": MIT, "README.md": conflicting_readme, "a.py": CODE},
        "agree": {"LICENSE": MIT, "README.md": "# x\n\n## License\n\nMIT License, see LICENSE.\n"},
    }  # fmt: skip
    result = LicenseFilter(LicenseParams(allow="any")).process(table(files))
    assert result.dropped == {"license/unknown": 1, "license/conflicting": 3}
    assert result.stats["license_repositories"] == {"unknown": 1, "conflicting": 1, "MIT": 1}
    assert result.stats["license_documents"] == {"unknown": 1, "conflicting": 3, "MIT": 2}
    kept = LicenseFilter(LicenseParams(allow="any", keep_unknown=True, keep_conflicting=True)).process(table(files))
    assert licenses_of(kept) == {"none": None, "clash": None, "agree": "MIT"} and kept.dropped == {}
    report = {row["repository"]: row for row in kept.stats["report"]}
    assert report["clash"]["license_source"] == "conflicting" and "GPL-3.0" in report["clash"]["license_evidence"]


def test_metadata_license_wins_and_the_report_row():
    files = {"given": {"LICENSE": MIT, "tests/test_a.py": CODE}, "detected": {"LICENSE": BSD_3, "a.py": CODE}}
    result = LicenseFilter().process(table(files, license=["Apache-2.0", None, None, None], stars=[None, 7, 3, None]))
    assert licenses_of(result) == {"given": "Apache-2.0", "detected": "BSD-3-Clause"}
    report = {row["repository"]: row for row in result.stats["report"]}
    assert report["given"] == {
        "repository": "given", "files": 2, "bytes": len(MIT.encode()) + len(CODE), "license": "Apache-2.0",
        "license_source": "metadata", "license_evidence": "license column: Apache-2.0", "declared_license": None, "stars": 7,
        "has_tests": True,
    }  # fmt: skip
    assert (report["detected"]["license_source"], report["detected"]["stars"], report["detected"]["has_tests"]) == ("license_file", 3, False)
    assert pa.Table.from_pylist(result.stats["report"], schema=LicenseFilter.report_schema).num_rows == 2


PKG_INFO = "Metadata-Version: 2.4\nName: app\nLicense-Expression: {}\n\nA long description. License: GPL-3.0-only\n"


def test_a_manifests_declared_licence_is_set_beside_the_files_and_a_difference_reported():
    """PEP 639's License-Expression (a wheel's METADATA reaches the stage as PKG-INFO), pyproject.toml, Cargo.toml and
    package.json: agreeing, it is recorded; differing, the files win by default and the evidence names the conflict;
    with prefer: declared, or where only a README or header notice speaks, the declaration is the licence."""
    files = {
        "agrees": {"LICENSE": MIT, "PKG-INFO": PKG_INFO.format("MIT"), "a.py": CODE},
        "differs": {"LICENSE": MIT, "pyproject.toml": '[project]\nname = "app"\nlicense = "Apache-2.0"\n', "a.py": CODE},
        "gnu": {"COPYING": GPL_NOTICE.format(v=3), "Cargo.toml": '[package]\nname = "app"\nlicense = "GPL-3.0"\n'},
        "no-file": {"package.json": '{"name": "app", "license": "mit OR Apache-2.0"}', "a.js": "// Licensed under the MIT License\n"},
        "vague": {"LICENSE": MIT, "PKG-INFO": PKG_INFO.format("BSD")},  # not an SPDX expression: no declaration
    }  # fmt: skip
    report = {row["repository"]: row for row in LicenseFilter(LicenseParams(allow="any")).process(table(files)).stats["report"]}
    assert (report["agrees"]["license"], report["agrees"]["declared_license"]) == ("MIT", "MIT")
    assert report["agrees"]["license_evidence"] == "LICENSE: MIT; PKG-INFO declares MIT"
    assert (report["differs"]["license"], report["differs"]["license_source"]) == ("MIT", "license_file")
    assert "conflict: pyproject.toml declares Apache-2.0, the files MIT" in report["differs"]["license_evidence"]
    assert report["gnu"]["license"] == "GPL-3.0-or-later" and "conflict" not in report["gnu"]["license_evidence"]
    assert (report["no-file"]["license"], report["no-file"]["license_source"]) == ("MIT OR Apache-2.0", "package_metadata")
    assert report["vague"]["declared_license"] is None and report["vague"]["license"] == "MIT"
    declared = LicenseFilter(LicenseParams(prefer="declared")).process(table({"differs": files["differs"]}))
    assert licenses_of(declared) == {"differs": "Apache-2.0"}


@pytest.mark.parametrize("value, expression", [
    ("MIT", "MIT"), ("mit or apache-2.0", "MIT OR Apache-2.0"), ("Apache-2.0 WITH LLVM-exception", "Apache-2.0 WITH LLVM-exception"),
    ("(MIT OR GPL-3.0-or-later) AND Apache-2.0", "(MIT OR GPL-3.0-or-later) AND Apache-2.0"), ("LicenseRef-Proprietary", "LicenseRef-Proprietary"),
    ("BSD", None), ("Apache 2.0", None), ("MIT X11", None), ("MIT/X11", None), ("MIT AND", None), (MIT, None), ("", None),
])  # fmt: skip
def test_only_an_spdx_expression_is_a_declaration(value, expression):
    assert spdx_expression(value) == expression


def test_manifests_are_read_at_the_top_level_from_their_license_tables():
    pyproject = '[build-system]\nlicense = "GPL-3.0-only"\n[tool.poetry]\nname = "x"\nlicense = "BSD-3-Clause"\n'
    assert declared_license(["pyproject.toml"], [pyproject]) == ("BSD-3-Clause", "pyproject.toml")
    assert declared_license(["pyproject.toml"], ['[project]\nlicense = { text = "MIT" }\n']) == ("MIT", "pyproject.toml")
    old_npm = '{"licenses": [{"type": "MIT"}, {"type": "GPL-2.0-only"}]}'
    assert declared_license(["package.json"], [old_npm]) == ("MIT OR GPL-2.0-only", "package.json")
    assert declared_license(["vendor/package.json", "package.json"], ['{"license": "MIT"}', "not json"]) is None


def test_paths_come_from_urls_when_the_reader_gives_none():
    """The code source before `path` existed wrote only url = "<repository>/<path>"."""
    result = LicenseFilter().process(table({"r": {"LICENSE": MIT, "tests/test_a.py": CODE}}).drop_columns(["path"]))
    assert licenses_of(result) == {"r": "MIT"} and result.stats["report"][0]["has_tests"]


def test_the_stage_is_registered_for_recipes():
    assert STAGES["license"] is LicenseFilter and not LicenseFilter.per_document and LicenseFilter.report_name == "repositories"
    stanza = {"stage": "license", "params": {"allow": ["MIT", "Apache-2.0"], "keep_unknown": True}}
    recipe = parse_recipe({"name": "code", "source": {"kind": "code"}, "stages": [stanza]}, "test")
    assert recipe.stages[0].params["allow"] == ["MIT", "Apache-2.0"]
    with pytest.raises(RecipeError, match=r"stages\[0\]\.params.*'Apache 2'"):
        parse_recipe({"name": "code", "source": {"kind": "code"}, "stages": [{"stage": "license", "params": {"allow": ["Apache 2"]}}]}, "test")


def installed_license_files(limit: int) -> list[tuple[str, str, str]]:
    """(package, License-Expression, LICENSE text) of installed packages declaring one simple SPDX id."""
    found = []
    for dist in sorted(Path(sysconfig.get_paths()["purelib"]).glob("*.dist-info")):
        expression = HeaderParser().parsestr((dist / "METADATA").read_text(errors="replace")).get("License-Expression", "")
        licenses = [p for p in (dist / "licenses").glob("*") if p.name.upper().startswith(("LICENSE", "COPYING"))] if (dist / "licenses").is_dir() else []
        if expression in ("MIT", "Apache-2.0", "BSD-3-Clause", "BSD-2-Clause", "ISC") and len(licenses) == 1:
            found.append((dist.name, expression, licenses[0].read_text(errors="replace")))
    return found[:: max(1, len(found) // limit)][:limit]


def test_real_license_files_of_installed_packages():
    packages = installed_license_files(limit=12)
    if not packages:
        pytest.skip("no installed package declares License-Expression with a single LICENSE file")
    wrong = [(name, expected, detected({"LICENSE": text}).license) for name, expected, text in packages]
    assert [w for w in wrong if w[1] != w[2]] == []


def shipped_text(spdx: str) -> str:
    """A text of the SPDX License List as the package ships it (filters/assets/licenses/texts.json)."""
    import json

    from filters.license_match import ASSETS

    return json.loads((ASSETS / "texts.json").read_text())["licenses"][spdx]["text"]


CC_TRAILER = ("\n\nCreative Commons is not a party to its public licenses. The text of the Creative Commons public licenses "
              "is dedicated to the public domain under the CC0 Public Domain Dedication. Creative Commons may be contacted "
              "at creativecommons.org.\n")  # fmt: skip


def test_a_license_text_that_carries_or_quotes_another_is_that_one_license():
    """The LGPL-3.0 as SPDX and REUSE hold it (its terms, then the GPL-3.0 they supplement), its terms alone, and the
    CC-BY-SA-4.0 with the legal code's closing words about CC0: each the single license, never an AND."""
    lgpl = shipped_text("LGPL-3.0")
    gpl_starts = lgpl.index("GNU GENERAL PUBLIC LICENSE")
    for text in (lgpl, lgpl[:gpl_starts]):
        assert detect(matcher(), ["LICENSE"], [text]).license == "LGPL-3.0-only"
    assert detect(matcher(), ["COPYING"], [lgpl[gpl_starts:]]).license == "GPL-3.0-only"
    assert detect(matcher(), ["LICENSE"], [shipped_text("CC-BY-SA-4.0") + CC_TRAILER]).license == "CC-BY-SA-4.0"


def licensedb_text(spdx: str) -> str:
    """A licence text as ScanCode's LicenseDB holds it (the `licensedcode-data` dependency)."""
    from filters.license_database import database_texts, licensedb_folder

    return dict(database_texts(licensedb_folder()))[spdx]


def test_licenses_beyond_the_common_ones_and_their_neighbouring_versions():
    """The OFL-1.1 as a REUSE LICENSES/OFL-1.1.txt holds it (its copyright and Reserved Font Name line first, lines
    wrapped anew), and licences whose versions share most words: each the one id."""
    import textwrap

    ofl = "Copyright (c) 2031, Ada Example (ada@example.org),\nwith Reserved Font Name Example Sans.\n\n" + "\n\n".join(
        textwrap.fill(paragraph, 66) for paragraph in licensedb_text("OFL-1.1").split("\n\n"))
    assert detect(matcher(), ["LICENSE"], [ofl]).license == "OFL-1.1"
    for spdx, expected in [("CC-BY-SA-3.0", "CC-BY-SA-3.0"), ("CC-BY-3.0", "CC-BY-3.0"), ("GFDL-1.2", "GFDL-1.2-only"),
                           ("GFDL-1.3", "GFDL-1.3-only"), ("Artistic-1.0-Perl", "Artistic-1.0-Perl"), ("GPL-1.0", "GPL-1.0-only")]:  # fmt: skip
        assert detect(matcher(), ["LICENSE"], [licensedb_text(spdx)]).license == expected


def test_a_file_holding_two_full_license_texts_is_their_and():
    """Apache-2.0's own words ("such third-party notices") are not where a file turns to bundled software."""
    both = shipped_text("MIT") + "\n\n" + shipped_text("Apache-2.0")
    assert detect(matcher(), ["LICENSE"], [both]).license == "Apache-2.0 AND MIT"


def test_an_spdx_identifier_wins_over_what_the_prose_suggests():
    gpl2 = shipped_text("GPL-2.0")
    assert detect(matcher(), ["LICENSE"], [gpl2]).license == "GPL-2.0-only"  # the text alone: no later versions claimed
    header = "SPDX-License-Identifier: GPL-2.0-or-later\n\n"
    assert detect(matcher(), ["LICENSE"], [header + gpl2]).license == "GPL-2.0-or-later"
