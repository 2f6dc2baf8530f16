"""The `secrets` stage on credentials planted in real files (the generator of benchmarks/secrets_recall.py) and on
real standard-library files, and the PII stage's placeholders for code."""

import ast
import sysconfig
from collections import Counter

import pyarrow as pa
import pytest

from benchmarks.secrets_recall import KINDS, clean_documents, found, planted_documents, table_of
from filters import STAGES
from filters.pii import PiiScrubber
from filters.secrets import SecretsRedactor

STDLIB = sysconfig.get_paths()["stdlib"]


@pytest.fixture(scope="module")
def stage():
    redactor = SecretsRedactor()
    redactor.ready()
    return redactor


@pytest.fixture(scope="module")
def planted():
    return planted_documents(per_kind=8, seed=11, root=STDLIB)


@pytest.fixture(scope="module")
def planted_out(stage, planted):
    return stage.process(table_of([(p.path, p.language, p.text) for p in planted]))


def test_planted_recall_of_every_kind(planted, planted_out, capsys):
    redacted = planted_out.kept["text"].to_pylist()
    hits, typed, total = Counter(), Counter(), Counter(p.kind for p in planted)
    for item, text in zip(planted, redacted):
        hits[item.kind] += found(item, text)
        typed[item.kind] += found(item, text) and item.placeholder in text
    with capsys.disabled():
        print("\nsecrets recall: " + ", ".join(f"{kind} {hits[kind]}/{total[kind]}" for kind in KINDS))
    assert len(total) >= 10 and len(total) == len(KINDS)
    assert sum(hits.values()) / len(planted) >= 0.95, hits
    assert sum(typed.values()) / len(planted) >= 0.95, typed
    assert all(hits[kind] / total[kind] >= 0.75 for kind in KINDS), hits


def test_clean_standard_library_files_rarely_change(stage):
    clean = clean_documents(300, seed=5, root=STDLIB)
    result = stage.process(table_of(clean))
    changed = [path for (path, _, text), after in zip(clean, result.kept["text"].to_pylist()) if text != after]
    assert len(clean) == 300 and result.kept.num_rows == 300
    assert len(changed) <= 3, changed


def test_redacted_python_still_parses(planted, planted_out):
    python = [(item, text) for item, text in zip(planted, planted_out.kept["text"].to_pylist()) if item.language == "Python"]
    parsed = 0
    for item, text in python:
        try:
            compile(item.original, item.path, "exec")
        except SyntaxError:  # a host of another Python's syntax
            continue
        compile(item.text, item.path, "exec")  # planted between top-level statements, the file still parses
        ast.parse(text)
        assert text != item.text
        parsed += 1
    assert parsed >= 30


def test_placeholders_and_counts_per_type(stage):
    config = 'DB_PASSWORD=Winter2024!\nAWS_ACCESS_KEY_ID=AKIAQ7VDXZ3KPLM2RTB4\napp_name=shop\n'
    code = ('import os\nDATABASE_URL = "postgresql://app:S3cure-pass_9@db.internal:5432/app"\n'
            'headers = {"Authorization": "token ghp_R2d4F6h8J0k2L4n6P8r0T2v4X6z8B0d2F4h6"}\n'
            'password = os.environ["PASSWORD"]\nPASSWORD_FIELD = "password"\n')  # fmt: skip
    table = pa.table({"id": ["env", "py", "none", "plain"], "text": [config, code, None, "x = 1\n"],
                      "language": [None, "Python", "Python", "Python"], "path": [".env", "app/settings.py", "a.py", "b.py"]})  # fmt: skip
    result = stage.process(table)
    texts = result.kept["text"].to_pylist()
    assert result.kept.num_rows == 4 and result.dropped == {}
    assert texts[0] == "DB_PASSWORD=<PASSWORD>\nAWS_ACCESS_KEY_ID=<KEY>\napp_name=shop\n"
    assert '"postgresql://app:<PASSWORD>@db.internal:5432/app"' in texts[1] and '"token <KEY>"' in texts[1]
    assert 'password = os.environ["PASSWORD"]' in texts[1] and 'PASSWORD_FIELD = "password"' in texts[1]
    assert texts[2] is None and texts[3] == "x = 1\n"
    assert result.kept["secret_counts"].to_pylist() == [[{"type": "KEY", "count": 1}, {"type": "PASSWORD", "count": 1}]] * 2 + [[], []]
    assert result.stats["secret_spans"] == {"KEY": 2, "PASSWORD": 2}
    assert result.stats["secret_documents"] == {"KEY": 2, "PASSWORD": 2}
    assert STAGES["secrets"] is SecretsRedactor


def test_private_key_block_body_goes_whatever_its_quoting(stage):
    body = ["MIIEowIBAAKCAQEAvX1c2r5sZq8mN3pL0kJ7tY4wH6gF9dS2aQ1zX8cV5bN7mK3j", "pL0kJ7tY4wH6gF9dS2aQ1zX8cV5bN7mK3jAB=="]
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END RSA PRIVATE KEY-----"
    one_per_line = 'KEY = (\n    "-----BEGIN EC PRIVATE KEY-----\\n"\n' + "".join(f'    "{line}\\n"\n' for line in body) + '    "-----END EC PRIVATE KEY-----\\n"\n)\n'
    escaped = pem.replace("\n", "\\n")
    for text, language in [(pem + "\n", None), (f'KEY = """{pem}"""\n', "Python"), (f'KEY = "{escaped}"\n', "Python"),
                           (one_per_line, "Python")]:  # fmt: skip
        redacted, counts, _ = stage.redact(text, language)
        assert not any(line in redacted for line in body), redacted
        assert "-----BEGIN" in redacted and "<KEY>" in redacted
        if language == "Python":
            ast.parse(redacted)


def test_dropping_is_an_explicit_choice():
    table = pa.table({"id": ["a", "b"], "text": ['token = "ghp_R2d4F6h8J0k2L4n6P8r0T2v4X6z8B0d2F4h6"', "x = 1"]})
    result = SecretsRedactor(SecretsRedactor.Params(drop_documents_with_secrets=True)).process(table)
    assert result.kept["id"].to_pylist() == ["b"] and result.dropped == {"secrets": 1}


def test_pii_code_placeholders_leave_versions_and_examples():
    scrubber = PiiScrubber(PiiScrubber.Params(entities=["EMAIL_ADDRESS", "IP_ADDRESS"], replacement="code"))
    source = ('__author__ = "Jane Roe <jane.roe@gmail.com>"\n__version__ = "2.0.1.3"\nversion_str = "v1.2.3.4"\n'
              'SERVER = "52.14.200.7"\nLOCAL = "127.0.0.1"\nDOCS = "192.0.2.10"\nPRIVATE = "10.0.0.5"\n'
              'TEST_ADDRESS = "foo@example.com"\nV6 = "2607:f8b0:4005:80a::200e"\n')  # fmt: skip
    table = pa.table({"id": ["a"], "text": [source], "language": ["Python"]})
    result = scrubber.process(table)
    scrubbed = result.kept["text"][0].as_py()
    assert scrubbed == source.replace("jane.roe@gmail.com", "<EMAIL>").replace('"52.14.200.7"', '"<IP_ADDRESS>"').replace(
        "2607:f8b0:4005:80a::200e", "<IP_ADDRESS>")  # fmt: skip
    ast.parse(scrubbed)
    assert result.kept["pii_counts"].to_pylist() == [[{"type": "EMAIL_ADDRESS", "count": 1}, {"type": "IP_ADDRESS", "count": 2}]]


@pytest.mark.parametrize(
    "text, language",
    [
        ("password: ${DB_PASSWORD}\n", "YAML"),
        ('password: "{{ vault_db_password }}"\n', "YAML"),
        ("DB_PASSWORD=$1\n", "Shell"),
        ('password = "%(password)s"\n', "Python"),
        ('PASSWORD_FIELD = "password"\n', "Python"),
        ('password = "********"\n', "Python"),
        ("password = getpass.getpass()\n", "Python"),
        ('tokenizer = "PipelineAsTokenizer.v1"\n', "Python"),
        ('"AWS::ApiGateway::ApiKey": "48205d4ffd7feba3",\n', "Python"),
        ('token_type = "bearer"\n', "Python"),
        ('url = "https://user:{password}@example.com"\n', "Python"),
        ("key = value  # INI comment\n", "INI"),
    ],
)
def test_templates_names_and_hashes_stay(stage, text, language):
    assert stage.redact(text, language)[0] == text


@pytest.mark.parametrize(
    "url, kept",
    [
        ("postgresql://admin:KQfrJomvqftIJh@db.internal.example:5432/prod", False),  # letters only: a password still
        ("amqp://worker:hunter@queue.internal/", False),
        ("postgresql://user:${DB_PASSWORD}@host/app", True),
        ("postgresql://user:{password}@host/app", True),
        ("postgresql://user:<password>@host/app", True),
        ("postgresql://user:%(password)s@host/app", True),
        ("postgresql://user:password@host/app", True),
        ("postgresql://user:changeme@host/app", True),
        ("postgresql://user:xxx@host/app", True),
        ("mysql://user:pass@localhost/app", True),
        ("mongodb://app:myPassword@host/app", True),
        ("amqp://guest:guest@localhost:5672/", True),  # the user name again: a default, not a secret
    ],
)
def test_a_url_password_is_a_password_unless_a_template_or_placeholder(stage, url, kept):
    text = f'DATABASE_URL = "{url}"\n'
    redacted = stage.redact(text, "Python")[0]
    password = url.split("@")[0].rsplit(":", 1)[1]
    assert redacted == (text if kept else text.replace(f":{password}@", ":<PASSWORD>@"))
