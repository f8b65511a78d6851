"""Adapters that let trainers and environment servers use our environments (each behind its own extra)."""
