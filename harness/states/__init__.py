"""JSON states: structural differences, and encodings written once per state. Standard library only (the sandbox worker
imports them)."""
