"""The licence a package's manifest declares, as an SPDX expression, for the license stage to set beside what its
licence files say: Python core metadata (an sdist's `PKG-INFO`, a wheel's METADATA, which the code reader passes as
`PKG-INFO`: PEP 639's `License-Expression`, else a `License:` field that is an SPDX expression), `pyproject.toml`
(`license` of [project] or [tool.poetry]), Cargo's `Cargo.toml` (`license` of [package]) and npm's `package.json`
(`license`, or the old `licenses` list). A value that is not an SPDX expression ("BSD", a licence's whole text) is
no declaration: a name that could be several licences is left to the files.
"""

import json
import re
from email.parser import HeaderParser

from filters.license_match import spdx_ids

_TOML_TABLE = re.compile(r"^\s*\[([^\]]+)\]\s*$")
_TOML_LICENSE = re.compile(r"""^\s*license\s*=\s*(?:"([^"]*)"|'([^']*)'|\{\s*text\s*=\s*"([^"]*)"\s*\})""")
_LICENSE_TABLES = {"project", "tool.poetry", "package", "workspace.package"}
_TOKEN = re.compile(r"\(|\)|[A-Za-z0-9.+:\-]+")


def declared_license(paths: list[str], texts: list[str]) -> tuple[str, str] | None:
    """(the SPDX expression, the manifest's path) of the first top-level manifest that declares one."""
    for path, text in zip(paths, texts):
        name = path.strip("/")
        reader = MANIFESTS.get(name.lower()) if "/" not in name else None
        expression = spdx_expression(reader(text)) if reader else None
        if expression:
            return expression, name
    return None


def spdx_expression(value: str | None) -> str | None:
    """`value` as an SPDX expression with ids spelled as SPDX spells them, or None when it is not one: every licence
    a known id or a LicenseRef-, an exception after each WITH, and a grammar license-expression parses."""
    from license_expression import ExpressionError, Licensing

    if not value or len(value) > 500 or _TOKEN.sub("", value).strip():  # "MIT/X11", a licence's text: not an expression
        return None
    tokens, known, after_with = [], spdx_ids(), False
    for token in _TOKEN.findall(value):
        operator = token.upper() if token.upper() in ("AND", "OR", "WITH") else None
        if operator or token in "()":
            tokens.append(operator or token)
        elif after_with or token.startswith("LicenseRef-"):
            tokens.append(token)
        elif token.lower() in known:
            tokens.append(known[token.lower()])
        else:
            return None
        after_with = operator == "WITH"
    expression = " ".join(tokens).replace("( ", "(").replace(" )", ")")
    licensing = Licensing()
    try:
        symbols = licensing.license_symbols(licensing.parse(expression), decompose=True) if expression else []
    except ExpressionError:
        return None
    named = [token for token in tokens if token not in ("AND", "OR", "WITH", "(", ")")]
    return expression if symbols and len(symbols) == len(named) else None  # "MIT X11" parses as one licence of two words


def _core_metadata(text: str) -> str | None:
    headers = HeaderParser().parsestr(text.split("\n\n", 1)[0] + "\n")  # the headers, not the long description
    return headers.get("License-Expression") or headers.get("License")


def _toml(text: str) -> str | None:
    table = ""
    for line in text.splitlines():
        if header := _TOML_TABLE.match(line):
            table = header.group(1).strip()
        elif table in _LICENSE_TABLES and (found := _TOML_LICENSE.match(line)):
            return next(group for group in found.groups() if group is not None)
    return None


def _npm(text: str) -> str | None:
    try:
        manifest = json.loads(text)
    except ValueError:
        return None
    if not isinstance(manifest, dict):
        return None
    value = manifest.get("license")
    if isinstance(value, dict):  # {"type": "MIT", "url": ...}, as old packages wrote it
        value = value.get("type")
    if value is None and isinstance(manifest.get("licenses"), list):
        types = [entry.get("type") for entry in manifest["licenses"] if isinstance(entry, dict) and isinstance(entry.get("type"), str)]
        value = " OR ".join(types) if types else None  # the old list offered each as a choice
    return value if isinstance(value, str) else None


MANIFESTS = {"pkg-info": _core_metadata, "pyproject.toml": _toml, "cargo.toml": _toml, "package.json": _npm}
