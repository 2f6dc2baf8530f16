"""Recall of the `secrets` stage on credentials planted in real code, and how many clean files it changes.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/secrets_recall.py [--planted 1700] [--clean 2000] [--seed 0]

Clean files: this Python's standard library and the packages installed beside it (code nobody here wrote), sampled
with a seed. Planted files: a credential of one of 17 kinds, random but seeded in the kind's real format, put into a
real file in one of several places (a Python assignment, dict literal or keyword argument, a JS const, a YAML/INI
key, a .env line, a shell export, a PEM block in a string or a file of its own). A planted secret counts as found
when none of its text is left after redaction; precision is the share of redacted spans in planted files that
cover a planted secret. Baseline, same files, same run: detect-secrets 1.5's full default scan (every plugin, its
default filters, `SecretsCollection.scan_file`), counted as finding a secret when it reports a value that overlaps
it (it flags, it does not redact). The test (tests/test_secrets.py) imports the generator from here.
"""

import argparse
import ast
import base64
import functools
import json
import random
import string
import sys
import sysconfig
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from filters.secrets import SecretsRedactor

LANGUAGE_BY_SUFFIX = {".py": "Python", ".js": "JavaScript", ".yml": "YAML", ".yaml": "YAML", ".ini": "INI",
                      ".cfg": "INI", ".toml": "TOML", ".sh": "Shell", ".txt": "Text", ".md": "Markdown", ".env": None,
                      ".pem": None}  # fmt: skip
ALNUM = string.ascii_letters + string.digits
UPPER_ALNUM = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"


@dataclass
class Planted:
    path: str
    language: str | None
    text: str
    kind: str
    fragments: list[str]  # what must be gone after redaction (a PEM block: each line of its body)
    placeholder: str
    original: str  # the host file before planting


@functools.cache
def real_files(root: str | None = None, limit_bytes: int = 200_000) -> list[Path]:
    """Text files of the standard library and site-packages with a suffix we know, sorted (the seed picks from them)."""
    roots = [root] if root else [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]]
    found = []
    for top in roots:
        for path in Path(top).rglob("*"):
            if path.suffix in LANGUAGE_BY_SUFFIX and path.is_file() and 0 < path.stat().st_size <= limit_bytes:
                found.append(path)
    return sorted(found)


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def clean_documents(count: int, seed: int, root: str | None = None) -> list[tuple[str, str | None, str]]:
    """(path, language, text) of `count` real files drawn with `seed`."""
    pool = real_files(root)
    rng = random.Random(seed)
    documents = []
    for path in rng.sample(pool, min(len(pool), count * 2)):
        text = read_text(path)
        if text and len(documents) < count:
            documents.append((str(path), LANGUAGE_BY_SUFFIX[path.suffix], text))
    return documents


def chars(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def password(rng: random.Random) -> str:
    """Generated (mixed classes) or human (word, year, symbol) passwords."""
    if rng.random() < 0.5:
        return chars(rng, ALNUM + "!#%&*+-=?^_~", rng.randint(10, 20)) + rng.choice(string.digits)
    word = rng.choice(["Summer", "dragon", "Monkey", "letmein", "Football", "shadow", "Welcome", "qwerty", "Sunshine"])
    return f"{word}{rng.randint(1, 2030)}{rng.choice(['', '!', '#', '$', '.', '*'])}"


def pem_block(rng: random.Random) -> tuple[str, list[str]]:
    kind = rng.choice(["RSA ", "EC ", "OPENSSH ", "", "DSA ", "ENCRYPTED "])
    body = base64.b64encode(rng.randbytes(rng.choice([121, 608, 1190]))).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return f"-----BEGIN {kind}PRIVATE KEY-----\n" + "\n".join(lines) + f"\n-----END {kind}PRIVATE KEY-----", lines


def secret_value(kind: str, rng: random.Random) -> str:
    """A random value in the kind's real format."""
    if kind == "aws_access_key_id":
        return rng.choice(["AKIA", "ASIA"]) + chars(rng, UPPER_ALNUM, 16)
    if kind == "aws_secret_access_key":
        return chars(rng, ALNUM + "+/", 40)
    if kind == "github_token":
        return rng.choice(["ghp_", "gho_", "ghs_"]) + chars(rng, ALNUM, 36)
    if kind == "github_fine_grained_token":
        return "github_pat_" + chars(rng, ALNUM, 22) + "_" + chars(rng, ALNUM, 59)
    if kind == "slack_token":
        return f"xox{rng.choice('bpa')}-{chars(rng, string.digits, 12)}-{chars(rng, string.digits, 13)}-{chars(rng, ALNUM, 24)}"
    if kind == "slack_webhook":
        return f"https://hooks.slack.com/services/T{chars(rng, UPPER_ALNUM, 8)}/B{chars(rng, UPPER_ALNUM, 10)}/{chars(rng, ALNUM, 24)}"
    if kind == "stripe_key":
        return rng.choice(["sk_live_", "rk_live_"]) + chars(rng, ALNUM, rng.choice([24, 34, 99]))
    if kind == "google_api_key":
        return "AIza" + chars(rng, ALNUM + "-_", 35)
    if kind == "jwt":
        header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        claims = {"sub": str(rng.randint(1, 10**9)), "name": rng.choice(["ana", "li", "sam"]), "iat": rng.randint(10**9, 2 * 10**9)}
        return f"{header}.{b64url(json.dumps(claims).encode())}.{b64url(rng.randbytes(32))}"
    if kind == "twilio_key":
        return rng.choice(["SK", "AC"]) + chars(rng, HEX, 32)
    if kind == "sendgrid_key":
        return f"SG.{chars(rng, ALNUM + '-_', 22)}.{chars(rng, ALNUM + '-_', 43)}"
    if kind == "npm_token":
        return "npm_" + chars(rng, ALNUM, 36)
    if kind == "azure_storage_key":
        return base64.b64encode(rng.randbytes(64)).decode()
    if kind in ("password_config", "connection_string"):
        return password(rng)
    if kind == "generic_api_key":
        return chars(rng, rng.choice([HEX, ALNUM, ALNUM + "-_"]), rng.choice([24, 32, 40, 64]))
    raise ValueError(f"benchmarks/secrets_recall.py: unknown kind {kind!r}")


NAMES = {
    "aws_access_key_id": ["AWS_ACCESS_KEY_ID", "aws_access_key_id", "accessKeyId", "key_id"],
    "aws_secret_access_key": ["AWS_SECRET_ACCESS_KEY", "aws_secret_access_key", "secretAccessKey"],
    "github_token": ["GITHUB_TOKEN", "gh_token", "token", "auth"],
    "github_fine_grained_token": ["GITHUB_TOKEN", "GH_PAT", "pat", "headers_auth"],
    "slack_token": ["SLACK_BOT_TOKEN", "slack_token", "bot"],
    "slack_webhook": ["SLACK_WEBHOOK_URL", "webhook", "url"],
    "stripe_key": ["STRIPE_SECRET_KEY", "stripe.api_key", "key"],
    "google_api_key": ["GOOGLE_API_KEY", "maps_key", "key"],
    "jwt": ["JWT", "auth_header", "bearer", "session"],
    "twilio_key": ["TWILIO_API_KEY", "twilio_sid", "sid"],
    "sendgrid_key": ["SENDGRID_API_KEY", "sg_key", "mail_key"],
    "npm_token": ["NPM_TOKEN", "npmToken"],
    "password_config": ["password", "DB_PASSWORD", "db_pass", "smtpPassword", "PGPASSWORD", "admin_pwd"],
    "generic_api_key": ["API_KEY", "api_key", "apiKey", "client_secret", "SECRET_KEY", "auth_token", "access_token"],
}
KINDS = [*NAMES, "private_key", "connection_string", "azure_storage_key"]
PLACEHOLDERS = {kind: "<PASSWORD>" if kind in ("password_config", "connection_string") else "<KEY>" for kind in KINDS}


def python_insert(host: str, line: str, rng: random.Random) -> str:
    """`line` (a top-level statement) before a random top-level statement of a parseable Python file, or at its end."""
    lines = host.splitlines(keepends=True)
    try:
        body = ast.parse(host).body
    except SyntaxError:
        body = []
    preamble = [i + 1 for i, node in enumerate(body) if isinstance(node, ast.ImportFrom) and node.module == "__future__"]
    first = max(preamble, default=1 if body and isinstance(body[0], ast.Expr) else 0)  # after the docstring/__future__
    starts = [min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) for node in body[first:]]
    at = rng.choice(starts) - 1 if starts else len(lines)
    if at == len(lines) and lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return "".join(lines[:at] + [line + "\n"] + lines[at:])


def connection_uri(rng: random.Random, secret: str) -> str:
    scheme, port = rng.choice([("postgresql", 5432), ("postgres", 5432), ("mysql", 3306), ("mongodb+srv", None),
                               ("redis", 6379), ("amqp", 5672), ("mssql+pyodbc", 1433)])  # fmt: skip
    user = "" if scheme == "redis" and rng.random() < 0.5 else rng.choice(["admin", "app", "etl_user", "root"])
    host = rng.choice(["db.internal", "10.0.3.17", "prod-db.example.com", "cluster0.ab1cd.mongodb.net"])
    return f"{scheme}://{user}:{secret}@{host}" + (f":{port}" if port else "") + "/" + rng.choice(["app", "main", "analytics"])


def plant(kind: str, rng: random.Random, hosts: dict[str, list[tuple[str, str]]]) -> Planted:
    """One planted file: a secret of `kind` put into a real host file in a place chosen with `rng`."""
    if kind == "private_key":
        block, fragments = pem_block(rng)
        place = rng.choice(["python", "python", "pem", "yaml"])
        if place == "pem":
            return Planted(f"deploy/id_{rng.randint(0, 99)}.pem", None, block + "\n", kind, fragments, "<KEY>", "")
        if place == "yaml":
            path, host = rng.choice(hosts["YAML"])
            indented = "\n".join("  " + line for line in block.splitlines())
            return Planted(path, "YAML", host.rstrip("\n") + f"\ntls_key: |\n{indented}\n", kind, fragments, "<KEY>", host)
        path, host = rng.choice(hosts["Python"])
        statement = rng.choice([f'PRIVATE_KEY = """{block}\n"""', f'SIGNING_KEY = "{block.replace(chr(10), chr(92) + "n")}"'])
        return Planted(path, "Python", python_insert(host, statement, rng), kind, fragments, "<KEY>", host)
    secret = secret_value(kind, rng)
    if kind == "connection_string":
        value, name = connection_uri(rng, secret), rng.choice(["DATABASE_URL", "db_uri", "BROKER_URL", "dsn", "engine_url"])
    elif kind == "azure_storage_key":
        value = (f"DefaultEndpointsProtocol=https;AccountName=store{rng.randint(1, 999)};AccountKey={secret};"
                 "EndpointSuffix=core.windows.net")  # fmt: skip
        name = rng.choice(["AZURE_STORAGE_CONNECTION_STRING", "conn_str", "storage"])
    else:
        value, name = secret, rng.choice(NAMES[kind])
    place = rng.choice(["python_assign", "python_dict", "python_kwarg", "js", "yaml", "ini", "env", "shell"])
    if kind == "npm_token" and rng.random() < 0.5:
        place = "npmrc"
    if place == "npmrc":
        text = f"registry=https://registry.npmjs.org/\n//registry.npmjs.org/:_authToken={secret}\nalways-auth=true\n"
        return Planted(".npmrc", None, text, kind, [secret], PLACEHOLDERS[kind], "")
    key = name.replace(".", "_")
    if place.startswith("python"):
        path, host = rng.choice(hosts["Python"])
        statement = {"python_assign": f'{name} = "{value}"',
                     "python_dict": f'SETTINGS = {{"debug": False, "{key}": "{value}", "timeout": 30}}',
                     "python_kwarg": f'client = Client(region="eu-west-1", {key.lower()}={value!r})'}[place]  # fmt: skip
        return Planted(path, "Python", python_insert(host, statement, rng), kind, [secret], PLACEHOLDERS[kind], host)
    if place == "js":
        path, host = rng.choice(hosts["JavaScript"])
        quote = rng.choice(["'", '"', "`"])
        line = rng.choice([f"const {key} = {quote}{value}{quote};", f"module.exports.config = {{ {key}: {quote}{value}{quote} }};"])
        return Planted(path, "JavaScript", host.rstrip("\n") + "\n" + line + "\n", kind, [secret], PLACEHOLDERS[kind], host)
    if place == "yaml":
        path, host = rng.choice(hosts["YAML"])
        line = rng.choice([f"{key}: {value}", f'{key}: "{value}"', f"credentials:\n  {key}: '{value}'"])
        return Planted(path, "YAML", host.rstrip("\n") + "\n" + line + "\n", kind, [secret], PLACEHOLDERS[kind], host)
    if place == "ini":
        path, host = rng.choice(hosts["INI"])
        line = f"[{rng.choice(['database', 'service', 'auth'])}]\n{key} = {value}"
        return Planted(path, "INI", host.rstrip("\n") + "\n\n" + line + "\n", kind, [secret], PLACEHOLDERS[kind], host)
    if place == "env":
        lines = ["APP_ENV=production", "LOG_LEVEL=info", f"{key.upper()}={value}", "PORT=8080"]
        rng.shuffle(lines)
        return Planted(".env", None, "\n".join(lines) + "\n", kind, [secret], PLACEHOLDERS[kind], "")
    path, host = rng.choice(hosts["Shell"])
    line = rng.choice([f'export {key.upper()}="{value}"', f"export {key.upper()}={value}", f"{key.upper()}='{value}'"])
    return Planted(path, "Shell", host.rstrip("\n") + "\n" + line + "\n", kind, [secret], PLACEHOLDERS[kind], host)


# a host for a language the scanned folders lack (the standard library alone has no YAML)
GENERATED_HOSTS = {
    "YAML": ("generated/compose.yml", "version: '3'\nservices:\n  web:\n    image: nginx:1.25\n    ports: ['8080:80']\n"),
    "INI": ("generated/setup.cfg", "[metadata]\nname = demo\n\n[options]\npackages = find:\n"),
    "Shell": ("generated/run.sh", "#!/bin/sh\nset -e\ncd \"$(dirname \"$0\")\"\n"),
    "JavaScript": ("generated/index.js", "'use strict';\nconst path = require('path');\nmodule.exports = {};\n"),
}


def host_files(seed: int, per_language: int = 200, root: str | None = None) -> dict[str, list[tuple[str, str]]]:
    """Real host files per language: stdlib and site-packages Python, and the few JS/YAML/INI/shell files there are."""
    by_language = defaultdict(list)
    for path in real_files(root):
        language = LANGUAGE_BY_SUFFIX[path.suffix]
        if language in ("Python", "JavaScript", "YAML", "INI", "Shell"):
            by_language[language].append(path)
    rng = random.Random(seed)
    hosts = {}
    for language, paths in by_language.items():
        picked = [(str(p), read_text(p)) for p in rng.sample(paths, min(len(paths), per_language))]
        hosts[language] = [(p, t) for p, t in picked if t]
    return {language: hosts.get(language) or [GENERATED_HOSTS[language]] for language in ["Python", *GENERATED_HOSTS]}


def planted_documents(per_kind: int, seed: int, root: str | None = None) -> list[Planted]:
    rng = random.Random(seed)
    hosts = host_files(seed, root=root)
    return [plant(kind, rng, hosts) for kind in KINDS for _ in range(per_kind)]


def table_of(rows: list[tuple[str, str | None, str]]) -> pa.Table:
    return pa.table({"id": [str(i) for i in range(len(rows))], "url": [f"bench/{p}" for p, _, _ in rows], "text": [t for _, _, t in rows],
                     "source": ["code"] * len(rows), "repository": ["bench"] * len(rows), "path": [p for p, _, _ in rows],
                     "language": [lang for _, lang, _ in rows]})  # fmt: skip


def found(planted: Planted, redacted: str) -> bool:
    return not any(fragment in redacted for fragment in planted.fragments)


def span_precision(stage: SecretsRedactor, planted: list[Planted]) -> tuple[int, int]:
    """Redacted spans in planted files that cover a planted fragment, and all redacted spans there."""
    true = total = 0
    for item in planted:
        spans = stage.find(item.text, item.language, item.path)
        secret_ranges = [(i, i + len(f)) for f in item.fragments for i in _occurrences(item.text, f)]
        total += len(spans)
        true += sum(any(a < e and s < b for a, b in secret_ranges) for s, e, _, _ in spans)
    return true, total


def _occurrences(text: str, fragment: str) -> list[int]:
    found_at, start = [], text.find(fragment)
    while start >= 0:
        found_at.append(start)
        start = text.find(fragment, start + 1)
    return found_at


def detect_secrets_scan(rows: list[tuple[str, str | None, str]]) -> tuple[list[dict[str, str]], float]:
    """detect-secrets' default scan of each file (written under its own name): {value: plugin} per file, seconds."""
    from detect_secrets import SecretsCollection
    from detect_secrets.settings import default_settings

    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for index, (path, _, text) in enumerate(rows):
            target = Path(folder) / str(index) / Path(path).name
            target.parent.mkdir()
            target.write_text(text, encoding="utf-8")
            paths.append(str(target))
        values, started = [], time.perf_counter()
        with default_settings():
            for path in paths:
                collection = SecretsCollection()
                collection.scan_file(path)
                values.append({s.secret_value or "": s.type for _, s in collection})
        return values, time.perf_counter() - started


def overlaps(values: dict[str, str], fragments: list[str]) -> bool:
    return any(v and (v in f or f in v) for v in values for f in fragments)


def ours(planted: list[Planted], clean: list[tuple[str, str | None, str]]) -> tuple[Counter, Counter, float]:
    """The stage on both sets: prints clean files changed, span precision and speed; found and typed per kind, files/s."""
    stage = SecretsRedactor()
    started = time.perf_counter()
    stage.ready()
    setup_seconds = time.perf_counter() - started
    rows = [(p.path, p.language, p.text) for p in planted]
    started = time.perf_counter()
    planted_out = stage.process(table_of(rows)).kept["text"].to_pylist()
    clean_result = stage.process(table_of(clean))
    seconds = time.perf_counter() - started
    changed = [path for (path, _, a), b in zip(clean, clean_result.kept["text"].to_pylist()) if a != b]
    megabytes = sum(len(t.encode()) for _, _, t in rows + clean) / 1e6
    hits, typed = Counter(), Counter()
    for item, redacted in zip(planted, planted_out):
        hits[item.kind] += found(item, redacted)
        typed[item.kind] += found(item, redacted) and item.placeholder in redacted
    true, total = span_precision(stage, planted)
    files = len(rows) + len(clean)
    print(f"secrets stage: clean files changed {len(changed)}/{len(clean)} = {len(changed) / len(clean):.2%} "
          f"(by detector {dict(clean_result.stats['secret_detectors'])}: {changed}); "
          f"span precision in planted files {true}/{total} = {true / max(total, 1):.3f}; "
          f"{files} files ({megabytes:.1f} MB) in {seconds:.2f} s = {files / seconds:.0f} files/s ({megabytes / seconds:.2f} MB/s), "
          f"setup {setup_seconds:.2f} s")  # fmt: skip
    return hits, typed, files / seconds


def baseline(planted: list[Planted], clean: list[tuple[str, str | None, str]]) -> tuple[Counter, float]:
    """detect-secrets' default scan on both sets: prints clean files flagged and speed; found per kind, files/s."""
    planted_values, planted_seconds = detect_secrets_scan([(p.path, p.language, p.text) for p in planted])
    clean_values, clean_seconds = detect_secrets_scan(clean)
    hits = Counter()
    for item, values in zip(planted, planted_values):
        # its private-key plugin reports the BEGIN line, not the body: the finding counts
        hits[item.kind] += overlaps(values, item.fragments) or (item.kind == "private_key" and "Private Key" in values.values())
    flagged = sum(bool(v) for v in clean_values)
    by_plugin = Counter(plugin for values in clean_values for plugin in values.values())
    files = len(planted) + len(clean)
    print(f"detect-secrets default scan: clean files flagged {flagged}/{len(clean)} = {flagged / len(clean):.2%} "
          f"(findings by plugin {dict(by_plugin.most_common())}); {files} files in {planted_seconds + clean_seconds:.1f} s "
          f"= {files / (planted_seconds + clean_seconds):.1f} files/s")  # fmt: skip
    return hits, files / (planted_seconds + clean_seconds)


def pii_on_clean(clean: list[tuple[str, str | None, str]]) -> None:
    """The PII stage in its code mode on the clean files: what it changes is emails and public IPs."""
    from filters.pii import PiiScrubber

    stage = PiiScrubber(PiiScrubber.Params(entities=["EMAIL_ADDRESS", "IP_ADDRESS"], replacement="code"))
    stage.ready()
    started = time.perf_counter()
    result = stage.process(table_of(clean))
    seconds = time.perf_counter() - started
    changed = sum(a != b for (_, _, a), b in zip(clean, result.kept["text"].to_pylist()))
    print(f"pii (replacement: code, EMAIL_ADDRESS + IP_ADDRESS): clean files changed {changed}/{len(clean)} = "
          f"{changed / len(clean):.2%}, spans {result.stats['pii_spans']}; {len(clean) / seconds:.0f} files/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--planted", type=int, default=100, help="planted files per kind")
    parser.add_argument("--clean", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--pii", action="store_true", help="also the PII stage's code mode on the clean files")
    args = parser.parse_args()
    planted = planted_documents(args.planted, args.seed)
    clean = clean_documents(args.clean, args.seed + 1)
    print(f"{len(planted)} planted files ({args.planted} per kind, {len(KINDS)} kinds), {len(clean)} clean files, seed {args.seed}")
    hits, typed, speed = ours(planted, clean)
    baseline_hits, baseline_speed = baseline(planted, clean) if not args.no_baseline else (None, None)
    if baseline_speed:
        print(f"secrets stage {speed / baseline_speed:.0f}x the default scan's files/s")
    if args.pii:
        pii_on_clean(clean)
    per_kind = Counter(p.kind for p in planted)
    print("| kind | planted | secrets stage recall | typed placeholder | detect-secrets default scan recall |\n|---|---|---|---|---|")
    for kind in [*KINDS, "overall"]:
        n = per_kind[kind] if kind != "overall" else len(planted)
        share = lambda counts: (counts[kind] if kind != "overall" else sum(counts.values())) / n  # noqa: E731
        print(f"| {kind} | {n} | {share(hits):.3f} | {share(typed):.3f} | {f'{share(baseline_hits):.3f}' if baseline_hits is not None else '-'} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
