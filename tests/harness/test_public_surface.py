"""The engine's curated surface: every name ``harness`` exports resolves, lazily, to the object its package
defines, and importing ``harness`` alone loads neither pydantic nor litellm (the sandbox worker relies on it)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import harness


def test_every_exported_name_is_the_object_of_its_package() -> None:
    for name in harness.__all__:
        if name == "__version__":
            continue
        value = getattr(harness, name)
        assert getattr(value, "__name__", name) == name, name
        assert value.__module__.startswith("harness."), (name, value.__module__)
        assert getattr(importlib.import_module(value.__module__), name) is value


def test_importing_the_package_loads_no_heavy_dependency() -> None:
    code = "import sys, harness; print(sorted(m for m in ('pydantic', 'litellm') if m in sys.modules))"
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert printed.strip() == "[]"
