"""The checkout's package metadata, for a Python that runs the checkout's code from ``PYTHONPATH`` without the
project installed (a venv of other pins): the ``harness.benchmarks`` entry points the registry reads are the
project's metadata, not its code, so such a venv finds the built-in benchmarks only with this folder on its path."""

from __future__ import annotations

import hashlib
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def checkout_metadata() -> Path:
    """A folder holding ``<name>-<version>.dist-info`` with the checkout's name, version and entry points, as its
    ``pyproject.toml`` declares them: one folder per content, in the temporary directory, shared by every caller."""
    text = (REPO / "pyproject.toml").read_bytes()
    project = tomllib.loads(text.decode("utf-8"))["project"]
    folder = Path(tempfile.gettempdir()) / f"envharness-metadata-{hashlib.sha256(text).hexdigest()[:16]}"
    info = folder / f"{project['name']}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n", encoding="utf-8"
    )
    groups = project.get("entry-points", {})
    lines = []
    for group, entries in groups.items():
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {value}" for name, value in entries.items())
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
    return folder
