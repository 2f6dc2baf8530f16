"""Curation: document schema, recipes, the Ray runner, sources, stats and the `curate` CLI."""
