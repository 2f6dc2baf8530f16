"""Credentials in code, redacted in place with typed placeholders: `<KEY>` for keys, tokens and private keys,
`<PASSWORD>` for passwords. Only the secret value is replaced, so quotes and syntax stay and a file that parsed still
parses.

Two finders. detect-secrets' format plugins (AWS, GitHub, Slack, Stripe, Twilio, SendGrid, npm, JWT, Azure, ...), in
process: a plugin's regexes screen the whole file once and the plugin reads only the lines they hit (detect-secrets'
`scan_line` on every line was ~150x slower, its default `scan_file` ~20x: benchmarks/secrets_recall.py). Its keyword
and high-entropy plugins are left out (on real code they flag hashes and test data), and so are its default filters
(they drop every finding on a line that assigns a call: `client = Client(key="AKIA...")`). Our own rules add what
its plugins miss or over-flag: Google API keys, fine-grained GitHub tokens, private-key blocks across lines, passwords
in connection strings (anything there but a template, a placeholder or the user name again: a word too), and values
assigned to secret-ish names (`password = ...`, `api_key: ...`), a password only when it is not a word or a template,
a key only when it is long and high-entropy. Unquoted values count only in config-like files (YAML, INI, .env,
shell), where they are values; in code a bare right-hand side is an expression.
"""

import math
import re
from collections import Counter
from pathlib import PurePosixPath

import pyarrow as pa
from pydantic import Field

from filters.base import COUNTS_BY_TYPE, Annotation, Stage, StageParams, counts_by_type

KEY, PASSWORD = "KEY", "PASSWORD"
# detect-secrets plugins that find values by their format; keyword, entropy and public-IP plugins stay out
# (Cloudant, IBM Cloud IAM, IBM COS HMAC and SoftLayer are keyword patterns around a vendor name: 70% of the plugins'
# regex time on code, and `*_key = <high-entropy>` assignments are our key rule's)
FORMAT_PLUGINS = (
    "AWSKeyDetector", "ArtifactoryDetector", "AzureStorageKeyDetector", "DiscordBotTokenDetector", "GitHubTokenDetector",
    "GitLabTokenDetector", "JwtTokenDetector", "MailchimpDetector", "NpmDetector", "OpenAIDetector", "PypiTokenDetector",
    "SendGridDetector", "SlackDetector", "SquareOAuthDetector", "StripeDetector", "TelegramBotTokenDetector",
    "TwilioKeyDetector",
)  # fmt: skip
# a looser regex that finds a plugin's lines faster than its own (a literal first): the plugin then reads those lines
FAST_SCREENS = {
    "ArtifactoryDetector": r"AKC[a-zA-Z0-9]{10}|AP[\dABCDEF][a-zA-Z0-9]{8}",
    "MailchimpDetector": r"-us[0-9]",
    "TelegramBotTokenDetector": r"\d:[0-9A-Za-z_-]{35}",
    "SlackDetector": r"xox[abposr]-|XOX[ABPOSR]-|hooks\.slack\.com",
    "StripeDetector": r"k_live_",
    "GitLabTokenDetector": r"gl[a-z]{2,7}-|GR1348941",
}
# languages (go-enry names) where `name = value` without quotes holds a literal value
CONFIG_LANGUAGES = {"YAML", "INI", "TOML", "Shell", "Dotenv", "Java Properties", "Text", "Dockerfile", "Ignore List"}
CONFIG_SUFFIXES = {".env", ".ini", ".cfg", ".conf", ".properties", ".yml", ".yaml", ".toml", ".sh", ".bash", ".txt"}

PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN (?P<kind>(?:[A-Z0-9]+ )*)PRIVATE KEY(?: BLOCK)?-----(?P<body>.*?)-----END (?P=kind)PRIVATE KEY(?: BLOCK)?-----",
    re.S,
)
BASE64_RUN = re.compile(r"(?:(?<=\\n)|(?<![\\A-Za-z0-9+/=]))[A-Za-z0-9+/=]{4,}")
OWN_KEY_FORMATS = {
    "google_api_key": re.compile(r"AIza[0-9A-Za-z_\-]{35}(?![\w-])"),
    "github_fine_grained_token": re.compile(r"github_pat_[0-9A-Za-z_]{82}(?!\w)"),
}
SCHEME_SEPARATOR = re.compile("://")
CONNECTION_PASSWORD = re.compile(r"\b[a-z][a-z0-9+.-]*://(?P<user>[^:@/\s'\"`]*):(?P<value>[^@/\s'\"`]+)@[\w.-]")
QUOTED_ASSIGNMENT = re.compile(
    r"""(?<![\w$])(?P<name>[A-Za-z_$@][\w.$-]{0,127})['"]?\]?\s*(?:=|:=|:|=>)\s*[rbuRBU]?(?P<q>['"`])(?P<value>[^'"`\s\\]{1,512}?)(?P=q)"""
)
UNQUOTED_ASSIGNMENT = re.compile(
    r"""^[ \t]*(?:export[ \t]+|set[ \t]+)?(?P<name>[A-Za-z_][\w.-]*)[ \t]*[=:][ \t]*(?P<value>[^\s'"`#;][^\s'"`]{0,511})[ \t]*(?:[#;].*)?$""",
    re.M,
)
# a plugin's value can carry its regex's delimiters or field name (Artifactory's quotes, Azure's `AccountKey=`), or
# stop short of the token's end (JWT's lazy signature, Stripe's 24 of up to 99 characters)
DELIMITERS = " \t\"'`=:"
VALUE_PREFIX = re.compile(r"^[A-Za-z]+=(?=.)")
TOKEN_TAIL = re.compile(r"[\w\-]*(?:[.+/][\w\-]+)*=*")
# the words a secret-ish name holds (see name_kind): lines without one hold no assignment worth reading
SECRET_WORD = re.compile(r"pass|pw|secret|token|key|credential|bearer|contrase|senha")  # on lower-cased text
NAME_TOKENS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
PASSWORD_TOKENS = {"password", "passwd", "passphrase", "pwd", "pass", "pw", "passwort", "contrasena", "senha"}
KEY_NAME_PARTS = (
    "secret", "token", "apikey", "accesskey", "privatekey", "authkey", "accountkey", "signingkey", "encryptionkey",
    "masterkey", "appkey", "clientkey", "credential", "subscriptionkey", "licensekey", "bearer",
)  # fmt: skip
# templates and format strings: {{x}} ${X} $(cmd) $X %(x)s %s {x} {} <x>, masks and ellipses
TEMPLATE = re.compile(r"\{\{|\$\{|\$\(|^\$\w+$|%\(\w+\)[sd]|%[sd]|\{\w*\}|<\w+>|^\*+$|\.\.\.")
# values that name a secret rather than hold one
PLACEHOLDER_VALUES = {"password", "passwd", "secret", "changeme", "change_me", "none", "null", "nil", "true", "false",
                      "redacted", "hidden", "masked", "required", "optional", "example", "dummy", "placeholder"}  # fmt: skip
# a value that names a secret instead of holding one (`pass`, `pwd`, `mypassword`, `db_secret`, `apiToken`)
SECRET_NAME_VALUE = re.compile(r"(?i)pw|[a-z]*[_-]?(?:pass(?:word|wd|phrase)?|pwd|secret|token|key)")
# a file path (lower-case folders: a random value starting with `/` has upper-case letters between its slashes) or URL
PATH_OR_URL = re.compile(r"(?:~|\.{1,2})?/(?:[a-z0-9_.-]+/)+[\w.-]*$|https?:")
KEY_CHARS = re.compile(r"[A-Za-z0-9+/=_\-.:~]{16,512}")


class SecretsParams(StageParams):
    min_key_entropy: float = Field(3.0, description="bits per character a value of a secret-ish name needs to be a key")
    min_key_length: int = Field(16, ge=8)
    min_password_length: int = Field(6, ge=1)
    drop_documents_with_secrets: bool = Field(False, description="drop a document holding any secret instead of redacting")


def shannon_entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def name_kind(name: str) -> str | None:
    """PASSWORD, KEY or None for a variable/key name, from its words (camelCase, snake_case, dotted, ...)."""
    last = re.split(r"[.$@]", name)[-1] or name
    tokens = [t.lower() for t in NAME_TOKENS.findall(last)]
    joined = re.sub(r"tokeni[sz]\w*", "", "".join(tokens))  # a tokenizer's name holds no token
    if any(t in PASSWORD_TOKENS or t.endswith("password") for t in tokens):
        return PASSWORD
    if any(part in joined for part in KEY_NAME_PARTS):
        return KEY
    return None


def looks_like_password(value: str, min_length: int) -> bool:
    """Not a word or identifier (those name a field), not a template, path, URL or placeholder, not one repeated char."""
    return (
        min_length <= len(value) <= 128
        and not re.fullmatch(r"[A-Za-z_\-. ]+", value)
        and not TEMPLATE.search(value)
        and value.lower() not in PLACEHOLDER_VALUES
        and len(set(value)) > 2
        and not PATH_OR_URL.match(value)
    )


def looks_like_url_password(value: str, user: str) -> bool:
    """In a URL's password position a value names no field, so letters alone are a password too: only a template, a
    placeholder (`password`, `changeme`, `xxx`, a secret's name) or the user name again (`guest:guest`, a default)
    is not."""
    return not (
        TEMPLATE.search(value)
        or value.lower() in PLACEHOLDER_VALUES
        or len(set(value)) <= 2
        or SECRET_NAME_VALUE.fullmatch(value)
        or value == user
    )


def looks_like_key(value: str, min_length: int, min_entropy: float) -> bool:
    """A token-alphabet string of high entropy with letters and digits (or, long, letters of both cases about evenly
    as random ones have, unlike CamelCase names): not a name, path, sentence, template, nor a short hex hash or id
    (16 hex digits are a checksum's, an API key's are 20 or more)."""
    letters = re.sub(r"[^A-Za-z]", "", value)
    upper_share = sum(c.isupper() for c in letters) / max(len(letters), 1)
    return (
        KEY_CHARS.fullmatch(value) is not None
        and len(value) >= min_length
        and letters != ""
        and (re.search(r"\d", value) is not None or (len(value) >= 20 and 0.3 <= upper_share <= 0.7))
        and not (re.fullmatch(r"[0-9a-fA-F]+", value) and len(value) < 20)
        and not PATH_OR_URL.match(value)
        and shannon_entropy(value) >= min_entropy
    )


def lines_with(pattern: re.Pattern, text: str) -> list[tuple[int, int]]:
    """(start, end) of each line of `text` holding a match of `pattern`, in order, once each."""
    lines = []
    for m in pattern.finditer(text):
        if lines and m.start() < lines[-1][1]:
            continue
        end = text.find("\n", m.end())
        lines.append((text.rfind("\n", 0, m.start()) + 1, end if end >= 0 else len(text)))
    return lines


def scoped(pattern: re.Pattern) -> str:
    """A regex as a group carrying its own flags, to join with others (AWS's secret-key regex ignores case)."""
    letters = "".join(letter for flag, letter in ((re.I, "i"), (re.M, "m"), (re.S, "s"), (re.X, "x")) if pattern.flags & flag)
    return f"(?{letters}:{pattern.pattern})"


def private_key_spans(text: str) -> list[tuple[int, int, str, str]]:
    """The body of each PEM private-key block: one span when it is one literal or a file's lines, else (a literal per
    line) each line's base64 run, so the quotes between them stay."""
    spans = []
    for block in PRIVATE_KEY_BLOCK.finditer(text):
        runs = list(BASE64_RUN.finditer(block["body"]))
        if not runs:
            continue
        offset = block.start("body")
        first, last = runs[0].start(), runs[-1].end()
        if re.search(r"['\"`]", block["body"][first:last]):
            spans += [(offset + r.start(), offset + r.end(), KEY, "private_key_block") for r in runs]
        else:
            spans.append((offset + first, offset + last, KEY, "private_key_block"))
    return spans


def unquoted_values(language: str | None, path: str | None) -> bool:
    """Whether `name = value` without quotes holds a literal: config languages, or by the file name when the language
    is unknown (a .env file has none in go-enry)."""
    if language is not None:
        return language in CONFIG_LANGUAGES
    name = PurePosixPath(path or "").name
    return not path or PurePosixPath(name).suffix.lower() in CONFIG_SUFFIXES or name.startswith(".env")


class SecretsRedactor(Stage):
    name = "secrets"
    Params = SecretsParams
    adds = {"text": pa.string(), "secret_counts": COUNTS_BY_TYPE}
    redacts = True

    def setup(self) -> None:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

        classes = {cls.__name__: cls for cls in get_mapping_from_secret_type_to_class().values()}
        missing = [name for name in FORMAT_PLUGINS if name not in classes]
        if missing:
            raise RuntimeError(f"filters/secrets.py: detect-secrets lacks plugins {missing}; install detect-secrets==1.5.*")
        self.plugins = [classes[name]() for name in FORMAT_PLUGINS]
        self.screens = [re.compile(FAST_SCREENS.get(name) or "|".join(map(scoped, plugin.denylist)))
                        for name, plugin in zip(FORMAT_PLUGINS, self.plugins)]  # fmt: skip

    def plugin_spans(self, text: str) -> list[tuple[int, int, str, str]]:
        """(start, end, type, detector) of each value a format plugin reports, on the lines its regexes hit."""
        spans = []
        for plugin, screen in zip(self.plugins, self.screens):
            for line_start, line_end in lines_with(screen, text):
                line = text[line_start:line_end]
                for value in {VALUE_PREFIX.sub("", v.strip(DELIMITERS)) for v in plugin.analyze_string(line)} - {""}:
                    for m in re.finditer(re.escape(value), line):
                        end = TOKEN_TAIL.match(line, m.end()).end()
                        spans.append((line_start + m.start(), line_start + end, KEY, type(plugin).__name__))
        return spans

    def own_spans(self, text: str, unquoted: bool) -> list[tuple[int, int, str, str]]:
        params = self.params
        spans = private_key_spans(text)
        for detector, pattern in OWN_KEY_FORMATS.items():
            spans += [(m.start(), m.end(), KEY, detector) for m in pattern.finditer(text)]
        for start, end in lines_with(SCHEME_SEPARATOR, text):
            for m in CONNECTION_PASSWORD.finditer(text, start, end):
                if looks_like_url_password(m["value"], m["user"]):
                    spans.append((m.start("value"), m.end("value"), PASSWORD, "connection_string"))
        patterns = (QUOTED_ASSIGNMENT, UNQUOTED_ASSIGNMENT) if unquoted else (QUOTED_ASSIGNMENT,)
        lowered = text.lower()  # a case-insensitive regex is 20x slower; lower() keeps offsets unless a letter grows
        if len(lowered) == len(text):
            word_lines = lines_with(SECRET_WORD, lowered)
        else:
            word_lines = lines_with(re.compile(SECRET_WORD.pattern, re.I), text)
        matches = (m for start, end in word_lines for p in patterns for m in p.finditer(text, start, end))
        for m in matches:
            kind, value = name_kind(m["name"]), m["value"]
            if kind == PASSWORD and looks_like_password(value, params.min_password_length):
                spans.append((m.start("value"), m.end("value"), PASSWORD, "password_assignment"))
            elif kind == KEY and looks_like_key(value, params.min_key_length, params.min_key_entropy):
                spans.append((m.start("value"), m.end("value"), KEY, "key_assignment"))
        return spans

    def find(self, text: str, language: str | None = None, path: str | None = None) -> list[tuple[int, int, str, str]]:
        """Non-overlapping (start, end, type, detector) spans, in order; of overlapping ones the earliest-longest wins."""
        spans = self.plugin_spans(text) + self.own_spans(text, unquoted_values(language, path))
        spans.sort(key=lambda s: (s[0], -s[1]))
        kept = []
        for span in spans:
            if kept and span[0] < kept[-1][1]:
                if span[1] > kept[-1][1]:
                    kept[-1] = (kept[-1][0], span[1], kept[-1][2], kept[-1][3])
                continue
            kept.append(span)
        return kept

    def redact(self, text: str, language: str | None = None, path: str | None = None) -> tuple[str, Counter, Counter]:
        """The text with each secret value replaced by its placeholder; counts per type and per detector."""
        spans = self.find(text, language, path)
        pieces, position = [], 0
        for start, end, kind, _ in spans:
            pieces += [text[position:start], f"<{kind}>"]
            position = end
        pieces.append(text[position:])
        return "".join(pieces), Counter(s[2] for s in spans), Counter(s[3] for s in spans)

    def annotate(self, table: pa.Table) -> Annotation:
        column = lambda name: table[name].to_pylist() if name in table.column_names else [None] * table.num_rows  # noqa: E731
        texts, counts, reasons = [], [], []
        spans, docs, detectors = Counter(), Counter(), Counter()
        for text, language, path in zip(table["text"].to_pylist(), column("language"), column("path")):
            redacted, found, by_detector = self.redact(text or "", language, path)
            texts.append(redacted if text is not None else None)
            counts.append(counts_by_type(found))
            reasons.append("secrets" if found and self.params.drop_documents_with_secrets else None)
            spans.update(found)
            docs.update(found.keys())
            detectors.update(by_detector)
        stats = {"secret_spans": dict(spans), "secret_documents": dict(docs), "secret_detectors": dict(detectors)}
        return Annotation(reasons=reasons, columns={"text": texts, "secret_counts": counts}, stats=stats)
