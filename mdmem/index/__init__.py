"""Keeping the index: the chunker, what each chunk embeds, the indexer and its sync report, the
retained entries of replicas, the index identity."""
