"""A finished run folder holds no secret or PII its recipe redacts: the parts written at the boundaries before the
`secrets` and `pii` stages are deleted when the run finishes (kept only with --keep-intermediate), and the run still
resumes and rewrites a deleted final part."""

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow
KEY, PASSWORD = "AKIAQ7VDXZ3KPLM2RTB4", "S3cure-pass_9x"
SETTINGS = f'''import os


def database_url():
    """Where the shop's orders live."""
    return "postgresql://app:{PASSWORD}@db.internal:5432/app"


def aws_key():
    return os.environ.get("AWS_ACCESS_KEY_ID", "{KEY}")
'''


def curate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "curation", *args], capture_output=True, text=True, timeout=600)


def holding_secrets(run: Path, planted: tuple[str, ...] = (KEY, PASSWORD)) -> list[str]:
    """Every file of the run (parts, removed documents, reports, stats.json, the manifest) that holds a planted secret,
    as bytes or, for Parquet, as its decoded rows."""
    found = []
    for path in sorted(p for p in run.rglob("*") if p.is_file()):
        text = path.read_bytes().decode("utf-8", "replace")
        if path.suffix == ".parquet":
            text += str(pq.read_table(path).to_pylist())
        if any(secret in text for secret in planted):
            found.append(str(path.relative_to(run)))
    return found


def test_boundary_parts_before_redaction_are_deleted_and_the_run_still_resumes(tmp_path):
    repository = tmp_path / "shop"
    (repository / "shop").mkdir(parents=True)
    (repository / "LICENSE").write_text("MIT License\n\nPermission is hereby granted, free of charge, to any person\n")
    (repository / "shop" / "settings.py").write_text(SETTINGS)
    (repository / "shop" / "cart.py").write_text("def total(items):\n    return sum(item.price for item in items)\n")
    run, unsafe = tmp_path / "run", tmp_path / "unsafe"

    kept = curate("run", "code-corpus", "--input", str(repository), "--output", str(unsafe), "--num-cpus", "1", "--keep-intermediate")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert holding_secrets(unsafe) == ["04_code_signals/part-00000.parquet", "05_dedup_exact/part-00000.parquet"]

    done = curate("run", "code-corpus", "--input", str(repository), "--output", str(run), "--num-cpus", "1", "--keep-removed")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Token authentication" not in done.stderr  # Ray's warning on every command, once
    assert "deleted the parts of 04_code_signals, 05_dedup_exact" in " ".join(done.stdout.split())
    final = run / "09_decontam" / "part-00000.parquet"
    texts = pq.read_table(final)["text"].to_pylist()
    assert any("<KEY>" in text and "<PASSWORD>" in text for text in texts)
    assert holding_secrets(run) == [] and sorted(p.name for p in run.glob("0*")) == ["09_decontam"]
    assert any((run / "removed").rglob("*.parquet"))  # the removed documents are there, redacted
    assert pq.read_table(final).equals(pq.read_table(unsafe / "09_decontam" / "part-00000.parquet"))

    written = final.stat().st_mtime_ns
    again = curate("run", "code-corpus", "--input", str(repository), "--output", str(run), "--num-cpus", "1", "--keep-removed")
    assert again.returncode == 0 and "resumed: 10 stage-shard(s)" in again.stdout and final.stat().st_mtime_ns == written

    final.unlink()  # what `curate tokenize` refuses, and tells to rerun `curate run` for
    redone = curate("run", "code-corpus", "--input", str(repository), "--output", str(run), "--num-cpus", "1", "--keep-removed")
    assert redone.returncode == 0, redone.stdout + redone.stderr
    assert pq.read_table(final).equals(pq.read_table(unsafe / "09_decontam" / "part-00000.parquet"))
    assert holding_secrets(run) == []


def test_a_text_run_keeping_removed_documents_holds_no_planted_address_in_any_file(tmp_path):
    """PII in documents a stage before `pii` drops (a duplicate, a short page) is redacted before removed/ keeps it;
    stats.json's samples show the redacted text only."""
    folder = tmp_path / "docs"
    folder.mkdir()
    page = ("The river runs past the old mill before it reaches the town, where the bridge was rebuilt last year.\n"
            "In spring the hills turn green and the walkers come back to the paths along the water.\n"
            "The maps of the valley show every farm, every footpath and the two roads over the pass.\n"
            "Anyone who wants a printed copy of the maps can write to {} and ask for one.\n"
            "The weather in autumn is mild, although the mornings are often foggy near the river banks.\n")
    for name in ("a", "b"):  # b is a's exact duplicate: dropped by dedup_exact, before pii
        (folder / f"{name}.md").write_text(page.format("jane.rivers@gmail.com"))
    (folder / "c.md").write_text(page.format("tom.hills@gmail.com").replace("rivers", "lakes"))
    run = tmp_path / "run"
    done = curate("run", "text-corpus", "--input", str(folder), "--output", str(run), "--num-cpus", "1", "--keep-removed")
    assert done.returncode == 0, done.stdout + done.stderr
    removed = [row for path in (run / "removed").rglob("*.parquet") for row in pq.read_table(path).to_pylist()]
    assert removed and (run / "05_pii" / "part-00000.parquet").exists()
    assert holding_secrets(run, ("jane.rivers@gmail.com", "tom.hills@gmail.com")) == []


def test_tokenize_refuses_a_curated_part_changed_after_curate_run_wrote_it(tmp_path):
    """`curate run` records each written part's sha256 in the manifest; a flipped byte is refused in one line, and
    the advice (delete it, rerun `curate run`) gives back the part it wrote."""
    import json

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("A plain paragraph about rivers, hills and the weather in spring.\n" * 4)
    run = tmp_path / "run"
    done = curate("run", "text-corpus", "--input", str(folder), "--output", str(run), "--num-cpus", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    part = next((run / "05_pii").glob("part-*.parquet"))
    recorded = json.loads((run / "manifest.json").read_text())["stages"]["05_pii"]["shards"]["0"]["part_sha256"]
    import hashlib

    original = part.read_bytes()
    assert hashlib.sha256(original).hexdigest() == recorded
    part.write_bytes(original[:60] + bytes([original[60] ^ 1]) + original[61:])
    refused = curate("tokenize", str(run), "--vocab-size", "300", "--num-cpus", "1")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"curate: {part} changed after `curate run` wrote it (sha256 {hashlib.sha256(part.read_bytes()).hexdigest()[:12]}; "
        f"its manifest.json records {recorded[:12]}): delete it and rerun `curate run` with the same arguments"
    ]
    part.unlink()
    again = curate("run", "text-corpus", "--input", str(folder), "--output", str(run), "--num-cpus", "1")
    assert again.returncode == 0 and part.read_bytes() == original
    assert curate("tokenize", str(run), "--vocab-size", "300", "--num-cpus", "1").returncode == 0
