"""Experiments that decide data: ablations, model ladders and scaling-law fits, above curation and training (neither imports this package)."""
