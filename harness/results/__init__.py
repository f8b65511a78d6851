"""A run's results: the append-only store, metrics, contradictions, and the forms results leave in (ATIF, SFT
datasets)."""
