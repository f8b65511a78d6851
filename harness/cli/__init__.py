"""The ``harness`` command line: one module per command group (see docs/architecture.md, "Where to add")."""

from harness.cli.app import app, main, with_default_ray_address

__all__ = ["app", "main", "with_default_ray_address"]
