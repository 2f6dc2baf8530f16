"""filters/kernels.c, compiled once per machine with the system's C compiler and called through ctypes.

The stages' inner loops (SHA-1 over shingles, MinHash minima, n-gram counts, normalization, union-find) were numba
kernels: each worker then imported numba and LLVM (~105 MiB and ~0.5 s before its first call) and a fresh machine
compiled them for ~16 s in every worker at once. A shared library built from plain C costs one compiler run per
machine (~1 s, into filters.packaged's cache, keyed by the source, the flags and the CPU, as numba's cache was)
and ~100 KiB per process. Built for this CPU as numba did (`-march=native`; `-mcpu=native` on POWER, whose GCC has no
-march): the build is keyed by this CPU's features, so a cache shared by different machines holds one build for each.
"""

import ctypes
import json
import os
import platform
import shlex
import shutil
import subprocess
from functools import cache
from pathlib import Path

import numpy as np

from filters.packaged import cached, file_digest

SOURCE = Path(__file__).with_name("kernels.c")
NATIVE = "-mcpu=native" if platform.machine().startswith(("ppc", "powerpc")) else "-march=native"
FLAGS = ["-O3", NATIVE, "-std=c99", "-fPIC", "-shared"]
LIBRARY = "kernels.so"

_P, _I, _BYTE = ctypes.c_void_p, ctypes.c_int64, ctypes.c_char
SIGNATURES = {  # name: (argument types, result type)
    "sha1_hash32_many": ([_P, _P, _P, _I, _P], None),
    "shingle_offsets": ([_P, _P, _I, _I, _P], None),
    "shingle_ranges": ([_P, _P, _I, _I, _P, _P, _P, _P], None),
    "minhash_signatures": ([_P, _P, _I, _P, _P, _I, ctypes.c_int, _P, _P], None),
    "top_gram_chars": ([_P, _I, _P, _I], _I),
    "repeated_chars": ([_P, _I, _P, _I, _I], _I),
    "non_ascii": ([_P, _I, _P], _I),
    "collapse": ([_P, _I, ctypes.c_int, ctypes.c_int, _P, _P, _P, _P], _I),
    "ngram_hashes": ([_P, _P, _I, _I, _P, _I, _I, _P, _P, _P, _P], _I),
    "union_find": ([_P, _P, _I, _I, _P], None),
    "jaccard": ([_P, _P, _P, _P, _I, _P], None),
}


def compiler() -> list[str]:
    found = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not found:
        raise RuntimeError(f"{SOURCE.name} needs a C compiler to build once per machine: install gcc (or set CC)")
    return shlex.split(found)


def _cpu() -> str:
    """This CPU's model and features, so a build for another CPU is never loaded here."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    wanted = ("model name", "flags", "Features", "CPU part")
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip() in wanted}))


def _build(folder: Path) -> None:
    command = [*compiler(), *FLAGS, "-o", str(folder / LIBRARY), str(SOURCE)]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as error:
        raise RuntimeError(f"{SOURCE.name}: could not run the C compiler {command[0]}: {error.strerror}") from None
    if result.returncode:
        lines = result.stderr.strip().splitlines() or [f"exit status {result.returncode}"]
        reason = next((line for line in lines if "error" in line), lines[0])
        raise RuntimeError(f"{SOURCE.name}: {' '.join(command[:-3])} failed: {reason}")


@cache
def kernels() -> ctypes.CDLL:
    """The built library with its functions' signatures declared (built here first if this machine has none; a
    machine with a build needs no compiler)."""
    key = file_digest(SOURCE, extra=json.dumps([FLAGS, _cpu()]))
    library = ctypes.CDLL(str(cached("kernels", key, _build) / LIBRARY))
    for name, (arguments, result) in SIGNATURES.items():
        function = getattr(library, name)
        function.argtypes, function.restype = arguments, result
    return library


def pointer(array: np.ndarray):
    """A C-contiguous array's data as a pointer argument that holds the array until the call returns: a writable
    array's buffer through ctypes (~0.4 us), a read-only or empty one's address (~2 us)."""
    if not array.flags.c_contiguous:
        raise ValueError("a kernel's array must be C-contiguous")
    try:
        return ctypes.byref(_BYTE.from_buffer(array))
    except (TypeError, ValueError):  # read-only, or empty
        return array.ctypes.data_as(ctypes.c_void_p)


def checked(result: int, kernel: str) -> int:
    """A kernel's count, or MemoryError where its scratch could not be allocated (it returns -1)."""
    if result < 0:
        raise MemoryError(f"{SOURCE.name}: {kernel} could not allocate its scratch memory")
    return result
