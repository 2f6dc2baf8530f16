"""Local files into text, with the reasons the code and text readers count when a file cannot be a document."""

import os


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
    """(text, None), or (None, why): `binary_file` for a NUL byte in the first 8 KiB, `undecodable` for bad UTF-8."""
    if b"\x00" in data[:8192]:
        return None, "binary_file"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "undecodable"
