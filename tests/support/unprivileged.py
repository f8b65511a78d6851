"""Run a command as an ordinary user, the way most people run the harness.

A root test process drops to uid/gid 65534 before it starts the command. If the Python installation sits below a
folder others cannot enter (a pyenv in /root), the launcher first lays a tmpfs over that folder, in a mount
namespace of its own, holding only the installation: the host itself is not changed. A test process that is not
root runs the command as it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534

LAUNCHER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def mount(source, target, fstype, flags, data):
    encoded = [None if value is None else value.encode() for value in (source, target, fstype, data)]
    if libc.mount(encoded[0], encoded[1], encoded[2], ctypes.c_ulong(flags), encoded[3]) != 0:
        raise OSError(ctypes.get_errno(), "mount " + target)
if libc.unshare(0x20000) != 0:
    raise OSError(ctypes.get_errno(), "unshare")
mount(None, "/", None, 0x4000 | 0x40000, None)
prefix = os.path.realpath(sys.base_prefix)
parts = prefix.split("/")[1:]
ancestors = ["/" + "/".join(parts[:n]) for n in range(1, len(parts))]
blocked = [path for path in ancestors if not os.stat(path).st_mode & 0o001]
if blocked:
    held = os.open(prefix, os.O_PATH)
    mount("tmpfs", blocked[0], "tmpfs", 0, "mode=0755")
    os.makedirs(prefix, mode=0o755)
    mount("/proc/self/fd/%d" % held, prefix, None, 0x1000 | 0x4000, None)
    os.close(held)
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
os.chdir(sys.argv[1])
os.execve(sys.argv[2], sys.argv[2:], dict(os.environ))
"""


def as_ordinary_user(argv: Sequence[str], cwd: str | Path = "/") -> list[str]:
    """``argv`` (an absolute executable first) run as uid 65534 when this process is root, else unchanged."""
    if os.geteuid() != 0:
        return list(argv)
    return [sys.executable, "-c", LAUNCHER, str(cwd), *argv]


def ordinary_environment(home: str | Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A small environment for the ordinary user's process: this checkout importable, a home of its own."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO),
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": str(home),
        "COLUMNS": "200",
        **(extra or {}),
    }


def open_to_ordinary_user(*paths: Path) -> None:
    """Let the ordinary user enter and write these folders (and enter their parents): pytest's tmp_path is 0700."""
    if os.geteuid() != 0:
        return
    for path in paths:
        os.chown(path, NOBODY, NOBODY)
        for parent in path.parents:
            mode = parent.stat().st_mode
            if not mode & 0o001:
                os.chmod(parent, mode | 0o001)


def run_as_ordinary_user(
    argv: Sequence[str],
    home: str | Path,
    *,
    cwd: str | Path = "/",
    extra_env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        as_ordinary_user(argv, cwd),
        capture_output=True,
        text=True,
        env=ordinary_environment(home, extra_env),
        timeout=timeout,
    )


__all__ = ["NOBODY", "as_ordinary_user", "open_to_ordinary_user", "ordinary_environment", "run_as_ordinary_user"]
