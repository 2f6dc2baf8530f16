"""The filesystem every experiment folder (ablation, ladder, decision) is written on: local, because an ablation's
variants share files by hard links. Its own module so the experiments that write folders share it without importing
each other."""

import fsspec

LOCAL = fsspec.filesystem("file")
