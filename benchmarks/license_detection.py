"""License detection accuracy and speed on ground truth nobody here wrote: installed Python packages.

    python benchmarks/license_detection.py [--site-packages DIR ...] [--held-out-from DIR] [--scancode PATH]

Each `*.dist-info` folder is one "repository": its LICENSE/COPYING/NOTICE files (under `licenses/` or beside
METADATA) at the top level, and METADATA's long description as README.md. The truth is the package's
`License-Expression`; else its `License:` field when that is a valid SPDX expression; else a trove classifier that
names one SPDX license unambiguously. Packages without a license file or without such truth are left out.

Detectors, per repository: ours (`filters.license.detect`, the `license` stage's detector) and, when given, scancode-
toolkit's `--license` scan of the same files in a subprocess (its own venv: it pins many packages), its per-file
SPDX expressions combined like ours (the same top-level license files, third-party ones left out, else README; several
joined with AND). Printed per detector:
exact (the same licenses and operators), same licenses (ignoring AND/OR and -only/-or-later), unknown, wrong, files/s
and ms per repository (scancode's includes its start-up, printed apart).
"""

import argparse
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from email.parser import HeaderParser
from pathlib import Path

from filters.license import LICENSE_FILE, THIRD_PARTY, detect
from filters.license_match import LicenseMatcher, matcher

CLASSIFIERS = {
    "MIT License": "MIT", "Apache Software License": None, "ISC License (ISCL)": "ISC", "The Unlicense (Unlicense)": "Unlicense",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0", "GNU General Public License v3 or later (GPLv3+)": "GPL-3.0-or-later",
    "GNU Lesser General Public License v3 or later (LGPLv3+)": "LGPL-3.0-or-later", "Boost Software License 1.0 (BSL-1.0)": "BSL-1.0",
    "zlib/libpng License": "Zlib", "MIT No Attribution License (MIT-0)": "MIT-0",
}  # fmt: skip
_OPERATORS = re.compile(r"\s+(AND|OR|WITH)\s+|[()]")


def truth(metadata: str, known: set[str]) -> tuple[str | None, str]:
    headers = HeaderParser().parsestr(metadata)
    if headers.get("License-Expression"):
        return headers["License-Expression"].strip(), "License-Expression"
    declared = (headers.get("License") or "").strip()
    if declared and len(declared) < 60 and ids(declared) and all(i.lower() in known for i in ids(declared)):
        return declared, "License"
    named = {CLASSIFIERS.get(c.split(" :: ")[-1]) for c in headers.get_all("Classifier") or [] if c.startswith("License ::")}
    named.discard(None)
    return (named.pop(), "classifier") if len(named) == 1 else (None, "")


def ids(expression: str | None) -> set[str]:
    return {part for part in _OPERATORS.split(expression or "") if part and part not in ("AND", "OR", "WITH")}


def loose(expression: str | None) -> set[str]:
    return {re.sub(r"(-only|-or-later|\+)$", "", i).lower() for i in ids(expression)}


def verdict(found: str | None, expected: str) -> str:
    if not found:
        return "unknown"
    operators = lambda e: set(_OPERATORS.findall(e)) - {""}  # noqa: E731
    if {i.lower() for i in ids(found)} == {i.lower() for i in ids(expected)} and operators(found) == operators(expected):
        return "exact"
    return "same licenses" if loose(found) == loose(expected) else "wrong"


def repositories(site_packages: list[Path], known: set[str]) -> list[dict]:
    """One entry per dist-info with a license file and a truth: name, truth, files {path: text}."""
    found = []
    for folder in site_packages:
        for dist in sorted(folder.glob("*.dist-info")):
            metadata = (dist / "METADATA").read_text(errors="replace") if (dist / "METADATA").is_file() else ""
            expected, source = truth(metadata, known)
            files = {}
            for path in sorted(p for p in dist.rglob("*") if p.is_file()):
                relative = path.relative_to(dist / "licenses") if path.is_relative_to(dist / "licenses") else path.relative_to(dist)
                if LICENSE_FILE.match(relative.parts[0]) or path.is_relative_to(dist / "licenses"):
                    files[relative.as_posix()] = path.read_text(errors="replace")
            if expected and any("/" not in p and LICENSE_FILE.match(p) for p in files):
                files["README.md"] = metadata.split("\n\n", 1)[1] if "\n\n" in metadata else ""
                found.append({"name": dist.name, "truth": expected, "truth_source": source, "files": files})
    return found


def run_ours(repos: list[dict]) -> tuple[list[str | None], float, float]:
    started = time.perf_counter()
    license_matcher = LicenseMatcher()  # the index a worker builds once in setup()
    setup = time.perf_counter() - started
    started = time.perf_counter()
    found = [detect(license_matcher, list(r["files"]), list(r["files"].values())).license for r in repos]
    return found, time.perf_counter() - started, setup


def run_scancode(repos: list[dict], scancode: str, processes: int) -> tuple[list[str | None], float, float]:
    """scancode on a tree of the same files; per repository its license files' expressions, else the README's."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tree"
        for index, repo in enumerate(repos):
            for path, text in repo["files"].items():
                target = root / str(index) / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        empty = Path(tmp) / "empty"
        (empty / "x").mkdir(parents=True)
        started = time.perf_counter()  # start-up and index loading alone, on an empty tree
        subprocess.run([scancode, "--license", "--json", str(Path(tmp) / "e.json"), "-n", "1", str(empty)], check=True, capture_output=True)
        startup = time.perf_counter() - started
        started = time.perf_counter()
        subprocess.run([scancode, "--license", "--json", str(Path(tmp) / "out.json"), "-n", str(processes), str(root)], check=True, capture_output=True)
        seconds = time.perf_counter() - started
        results = json.loads((Path(tmp) / "out.json").read_text())["files"]
    per_repo: dict[int, dict[str, str]] = {}
    for entry in results:
        parts = Path(entry["path"]).parts[1:]
        if entry["type"] == "file" and entry.get("detected_license_expression_spdx") and len(parts) >= 2:
            per_repo.setdefault(int(parts[0]), {})["/".join(parts[1:])] = entry["detected_license_expression_spdx"]
    found = []
    for index in range(len(repos)):
        files = per_repo.get(index, {})
        top = [e for p, e in files.items() if "/" not in p and LICENSE_FILE.match(p) and not THIRD_PARTY.search(p)]
        top = top or [e for p, e in files.items() if p == "README.md"]
        unique = sorted(set(top))
        found.append(" AND ".join(f"({e})" if " " in e else e for e in unique) if unique else None)
    return found, seconds, startup


def _project(dist_info: str) -> str:
    return dist_info.split("-")[0].lower()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = [Path(sysconfig.get_paths()["purelib"])]
    parser.add_argument("--site-packages", type=Path, action="append", help=f"default: {default[0]}")
    parser.add_argument("--scancode", default=shutil.which("scancode"), help="scancode executable (its own venv)")
    parser.add_argument("--processes", type=int, default=1, help="scancode -n")
    parser.add_argument("--held-out-from", type=Path, help="leave out packages also installed in this site-packages (the set tuned on)")
    parser.add_argument("--show-wrong", action="store_true")
    args = parser.parse_args()
    known = set(matcher().known_ids)
    repos = repositories(args.site_packages or default, known)
    if args.held_out_from:
        seen = {_project(dist.name) for dist in args.held_out_from.glob("*.dist-info")}
        repos = [r for r in repos if _project(r["name"]) not in seen]
    n_files = sum(len(r["files"]) for r in repos)
    sources = {s: sum(r["truth_source"] == s for r in repos) for s in ("License-Expression", "License", "classifier")}
    print(f"{len(repos)} packages with a license file and a known SPDX truth ({sources}), {n_files} files", file=sys.stderr)
    detectors = {"ours (SPDX texts + notices)": run_ours}
    if args.scancode:
        detectors["scancode-toolkit"] = lambda r: run_scancode(r, args.scancode, args.processes)
    print("| detector | exact | same licenses | unknown | wrong | files/s | ms per repository | setup s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, run in detectors.items():
        found, seconds, setup = run(repos)
        verdicts = [verdict(f, r["truth"]) for f, r in zip(found, repos)]
        share = lambda v: f"{verdicts.count(v) / len(repos):.1%}"  # noqa: E731
        print(f"| {name} | {share('exact')} | {share('same licenses')} | {share('unknown')} | {share('wrong')} | {n_files / seconds:,.0f} | {1000 * seconds / len(repos):.1f} | {setup:.1f} |")
        if args.show_wrong:
            for f, r, v in zip(found, repos, verdicts):
                if v != "exact":
                    print(f"    {v}: {r['name']} truth {r['truth']!r} found {f!r} files {list(r['files'])}", file=sys.stderr)


if __name__ == "__main__":
    main()
