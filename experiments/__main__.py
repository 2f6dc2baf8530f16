import sys

from experiments.cli import curate_main

sys.exit(curate_main())
