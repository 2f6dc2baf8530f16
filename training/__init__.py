"""Training: an FSDP2 trainer that reads curated token shards in a mixture's proportions."""
