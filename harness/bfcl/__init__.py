"""BFCL multi-turn: scoring as its checker scores, and export in its result-file format."""

from harness.bfcl.checker import score_turns

__all__ = ["score_turns"]
