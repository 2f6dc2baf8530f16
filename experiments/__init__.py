"""Experiments above curation and training: ladders, scaling-law fits and data ablations."""
