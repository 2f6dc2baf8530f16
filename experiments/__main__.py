from experiments.cli import curate_script

curate_script()
