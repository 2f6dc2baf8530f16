"""`python -m training`: `train`'s launcher, or one of the ranks it starts under torchrun (they end in training.cli).

The launcher ends with os._exit once its output is flushed: Python's teardown of the torch modules it loaded would
add most of a second to every run, and nothing is left to it (the lock is released and files are closed in main)."""

import os
import sys

from training.cli import main

code = main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code or 0)  # as sys.exit(None): a command that returns nothing succeeded
