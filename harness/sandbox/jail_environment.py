"""Jail environments: the third-party packages a benchmark's environment code imports, at the versions its upstream
pins, installed once into a cache folder of their own and read by the jail instead of the harness's copies.

A benchmark declares one (:class:`JailEnvironment`: pinned requirements, the import names its code uses, and the
upstream file the pins come from). :func:`ensure_built` installs it from PyPI with this interpreter's ``pip``
(``--target``, for the same CPython and platform) into ``<cache>/jail/<name>-<key>/``, the key hashing the pins,
the CPython version and the machine, so a new pin or interpreter gets a folder of its own. A build happens under an
exclusive lock (``<folder>.lock``), in a folder of another name that is renamed into place only once every declared
module imports from it alone (a fresh interpreter with neither site-packages nor the harness on its path) at the
declared versions: an interrupted or failed build is never taken for a ready one, and a built one is reused. The
cache is ``$ENVHARNESS_CACHE`` or ``~/.cache/envharness``; offline, a missing environment is one error line.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.sandbox.errors import SandboxError
from harness.schema.jail import JailEnvironment

logger = logging.getLogger(__name__)

CACHE_VARIABLE = "ENVHARNESS_CACHE"
READY = "ready.json"
"""Written last into a built environment: what was installed, at which versions, and how long it took."""
SITE = "site"
"""The folder of a built environment that holds the packages (the jail's only third-party readable root)."""
BUILD_TIMEOUT_S = 900


class JailEnvironmentUnavailable(SandboxError):
    """A declared environment is not in the cache and cannot be built (offline, a pin PyPI lacks, no pip)."""


@dataclass(frozen=True)
class BuiltEnvironment:
    """A jail environment ready in the cache."""

    root: Path
    installed: dict[str, str]
    """Every distribution in it, by normalised name: version."""
    build_seconds: float | None
    """How long this process took to build it (None: it was in the cache)."""

    @property
    def site(self) -> Path:
        return self.root / SITE


def with_submodules(optional: Iterable[str] | None, environment: JailEnvironment | None) -> frozenset[str] | None:
    """The modules a pool imports ahead (``optional``; None: all), with the environment's declared submodules of
    every top-level name among them."""
    if optional is None:
        return None
    chosen = frozenset(optional)
    if environment is None:
        return chosen
    named = {name.split(".")[0] for name in chosen}
    return chosen | {name for name in environment.modules if name.split(".")[0] in named}


def cache_root() -> Path:
    """Where jail environments live: ``$ENVHARNESS_CACHE/jail``, else ``~/.cache/envharness/jail``."""
    base = os.environ.get(CACHE_VARIABLE)
    return (Path(base).expanduser() if base else Path.home() / ".cache" / "envharness") / "jail"


def ensure_built(environment: JailEnvironment, root: Path | None = None) -> BuiltEnvironment:
    """The environment's folder, built first when the cache lacks it (one process builds, the others wait)."""
    folder = (root or cache_root()) / environment.key
    ready = _read_ready(folder)
    if ready is not None:
        return BuiltEnvironment(folder, ready, None)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = open(folder.with_name(folder.name + ".lock"), "a+b")  # noqa: SIM115  (held until the build ends)
    except OSError as exc:
        raise JailEnvironmentUnavailable(
            f"the jail environment of {environment.name} is not built and its cache folder {folder.parent} cannot be "
            f"written ({exc.strerror or exc}); set {CACHE_VARIABLE} to a folder you can write"
        ) from exc
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            ready = _read_ready(folder)
            if ready is not None:
                return BuiltEnvironment(folder, ready, None)
            return _build(environment, folder)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached_environments(root: Path | None = None) -> list[tuple[Path, dict[str, object]]]:
    """Every built jail environment in the cache, with what its ``ready.json`` records (``harness doctor``)."""
    base = root or cache_root()
    if not base.is_dir():
        return []
    found = []
    for folder in sorted(base.iterdir()):
        record = folder / READY
        if folder.is_dir() and not folder.is_symlink() and record.is_file():
            try:
                found.append((folder, dict(json.loads(record.read_text(encoding="utf-8")))))
            except (OSError, ValueError):
                continue
    return found


def _read_ready(folder: Path) -> dict[str, str] | None:
    try:
        record = json.loads((folder / READY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    installed = record.get("installed") if isinstance(record, dict) else None
    return {str(k): str(v) for k, v in installed.items()} if isinstance(installed, dict) else None


def _build(environment: JailEnvironment, folder: Path) -> BuiltEnvironment:
    started = time.monotonic()
    building = folder.with_name(f"{folder.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)  # a folder without its ready record is an interrupted build
    what = f"the jail environment of {environment.name} ({', '.join(environment.requirements)})"
    logger.info("building %s in %s", what, folder)
    try:
        _pip_install(environment, building / SITE, what)
        installed = _verify(environment, building / SITE, what)
        _readable_by_all(building)
        seconds = time.monotonic() - started
        record = {
            "name": environment.name,
            "requirements": list(environment.requirements),
            "reference": environment.reference,
            "python": sys.version.split()[0],
            "installed": installed,
            "build_seconds": round(seconds, 1),
        }
        (building / READY).write_text(json.dumps(record, indent=2), encoding="utf-8")
        os.chmod(building / READY, 0o644)
        building.rename(folder)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return BuiltEnvironment(folder, installed, seconds)


def _pip_install(environment: JailEnvironment, site: Path, what: str) -> None:
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input"]
    command += ["--only-binary", ":all:", "--no-user", "--target", str(site), *environment.requirements]
    try:
        finished = subprocess.run(
            command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=_pip_environment(), check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JailEnvironmentUnavailable(f"{what} is not in {site.parent.parent} and pip could not run: {exc}") from exc
    if finished.returncode != 0:
        lines = [line.strip() for line in finished.stderr.splitlines() if line.strip()]
        reason = next((line for line in reversed(lines) if line.startswith("ERROR")), lines[-1] if lines else "")
        raise JailEnvironmentUnavailable(
            f"{what} is not in {site.parent.parent} and could not be installed from PyPI ({reason or 'pip failed'}); "
            "build it once with access to PyPI (any run of such a library does), or copy the folder from a machine "
            f"that has it (its name: {site.parent.name.split('.building-')[0]})"
        )


def _pip_environment() -> dict[str, str]:
    """What pip needs of the harness's environment: its own settings (``PIP_*``), proxies, home and path."""
    keep = {"PATH", "HOME", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"}
    return {
        name: value for name, value in os.environ.items() if name.upper() in keep or name.upper().startswith("PIP_")
    }


VERIFY = """
import importlib, importlib.metadata as metadata, json, os, sys
site = sys.argv[1]
modules = json.loads(sys.argv[2])
for module in modules:
    loaded = importlib.import_module(module)
    where = os.path.realpath(getattr(loaded, "__file__", "") or "")
    if not where.startswith(site + os.sep):
        raise SystemExit(f"{module} was imported from {where}, not from the environment")
installed = {
    dist.metadata["Name"].lower().replace("_", "-").replace(".", "-"): dist.version
    for dist in metadata.distributions(path=[site])
}
print(json.dumps(installed))
"""


def _verify(environment: JailEnvironment, site: Path, what: str) -> dict[str, str]:
    """Import every declared module from the environment alone, in a fresh interpreter (no site-packages, no
    harness on its path), and read the versions installed; the pins must be among them."""
    real = os.path.realpath(site)
    command = [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {real!r});" + VERIFY]
    command += [real, json.dumps(sorted(environment.modules))]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=120, env={}, check=False)
    if finished.returncode != 0:
        lines = finished.stderr.strip().splitlines()
        raise JailEnvironmentUnavailable(f"{what} was installed but does not import: {lines[-1] if lines else ''}")
    installed: dict[str, str] = json.loads(finished.stdout)
    wrong = {
        name: installed.get(name) for name, version in environment.pins().items() if installed.get(name) != version
    }
    if wrong:
        raise JailEnvironmentUnavailable(f"{what} was installed at other versions: {wrong}")
    return installed


def _readable_by_all(folder: Path) -> None:
    """A child of a root harness runs as a uid of its own: every file must be readable, every folder enterable."""
    for path, _folders, files in os.walk(folder):
        os.chmod(path, 0o755)
        for name in files:
            target = os.path.join(path, name)
            if not os.path.islink(target):
                os.chmod(target, 0o644 | (os.stat(target).st_mode & 0o111))


__all__ = [
    "BuiltEnvironment",
    "JailEnvironment",
    "JailEnvironmentUnavailable",
    "cache_root",
    "cached_environments",
    "ensure_built",
    "with_submodules",
]
