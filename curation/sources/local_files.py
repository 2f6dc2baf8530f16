"""Local files into text, with the reasons the code, text and HTML readers count when a file cannot be a document."""

import os
import re

from resiliparse.parse.encoding import detect_encoding

# a declaration in a file's first two lines: PEP 263's (and Emacs') `# -*- coding: latin-1 -*-`, XML's `encoding="..."`
CODING = re.compile(rb"""coding[:=][ \t]*["']?([-\w.]+)""")
CONTROL = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f]")  # neither text nor its whitespace (nor ESC of colours)
MAX_CONTROL_SHARE = 0.01  # a detected decoding with more is binary data read as some 8-bit charset


def input_files(path: str, kind: str) -> list[str]:
    """Every file of an input, supported or not (so a reader can count the rest): a directory walked in sorted order,
    hidden folders skipped, or one file."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{kind} input {path} does not exist")
    if not os.path.isdir(path):
        return [path]
    files = []
    for folder, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files += [os.path.join(folder, name) for name in sorted(names)]
    return files


def load_file(file: str, max_bytes: int) -> tuple[int, bytes | str]:
    """(bytes on disk, the content or why there is none); a file over max_bytes is judged by its size, never opened."""
    if not os.path.isfile(file):  # a broken link, a pipe, a socket
        return 0, "not_a_file"
    size = os.path.getsize(file)
    if size > max_bytes:
        return size, "file_too_large"
    try:
        with open(file, "rb") as handle:
            return size, handle.read()
    except OSError:
        return size, "unreadable"


def decode(data: bytes) -> tuple[str | None, str | None]:
    """(text, None), or (None, why): `binary_file` for a NUL byte in the first 8 KiB; else the encoding the file
    declares, UTF-8, then the one detected (as extraction decodes web pages), so a Latin-1 file is text;
    `undecodable` when none of them gives text (bytes the charset lacks, or control characters of binary data)."""
    if b"\x00" in data[:8192]:
        return None, "binary_file"
    declared = CODING.search(b"\n".join(data[:1024].split(b"\n", 2)[:2]))
    for charset in ([declared.group(1).decode("ascii")] if declared else []) + ["utf-8"]:
        try:
            return data.decode(charset), None
        except (LookupError, UnicodeDecodeError):
            continue
    charset = detect_encoding(data)
    if charset.startswith(("utf-16", "utf-32")):  # its text would hold NUL bytes; a BOM-like start is not enough
        return None, "undecodable"
    try:
        text = data.decode(charset)
    except (LookupError, UnicodeDecodeError):
        return None, "undecodable"
    if len(CONTROL.findall(text)) > MAX_CONTROL_SHARE * len(text):
        return None, "undecodable"
    return text, None
