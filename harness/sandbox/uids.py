"""Uids for the children of a zygote started as root: a block no other zygote and no real account holds.

Each zygote reserves a random block of :data:`BLOCK_SIZE` uids in a high range and holds an exclusive ``flock``
on a lock file named after the block for as long as it lives, so two zygotes (of one run or of two concurrent
runs) never share a uid. A block in which any uid or gid belongs to an account or group of this machine is
skipped. The lock folder is created root-owned and 0700; one that is not is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import random
import stat
from dataclasses import dataclass

RANGE_START = 1_500_000_000
BLOCK_SIZE = 1 << 20
BLOCKS = 2000  # up to RANGE_START + 2000 * 2**20, below 2**32 - 2 (the "no uid" values)
_ATTEMPTS = 64


class UidBlockError(RuntimeError):
    """No block of uids could be reserved."""


@dataclass
class UidBlock:
    first: int
    lock_fd: int
    lock_path: str

    def uid(self, slot: int) -> int:
        return self.first + slot % BLOCK_SIZE


def lock_folder() -> str:
    if os.path.isdir("/run"):
        base = "/run"
    else:
        import tempfile  # only here: it imports shutil and the compression modules, which the zygote never needs

        base = tempfile.gettempdir()
    return os.path.join(base, "envharness", "uids")


def _safe_folder(path: str) -> None:
    """Create ``path`` (0700, owned by root) or check that it already is; raise otherwise."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o077:
        raise UidBlockError(f"{path} is not a folder private to root; refusing to keep uid locks in it")


def _taken_ids() -> list[int]:
    """Every uid and gid that an account or group of this machine holds, as far as it can be listed."""
    taken = [entry.pw_uid for entry in pwd.getpwall()]
    taken += [entry.pw_gid for entry in pwd.getpwall()]
    taken += [entry.gr_gid for entry in grp.getgrall()]
    return taken


def _is_free(first: int, taken: list[int]) -> bool:
    if any(first <= value < first + BLOCK_SIZE for value in taken):
        return False
    # Accounts that a directory service holds but does not list: ask for the ends of the block by number.
    for value in (first, first + BLOCK_SIZE - 1):
        with contextlib.suppress(KeyError):
            pwd.getpwuid(value)
            return False
        with contextlib.suppress(KeyError):
            grp.getgrgid(value)
            return False
    return True


def reserve_block(folder: str | None = None) -> UidBlock:
    """Lock a random free block for the calling process. The lock holds until every copy of ``lock_fd`` closes."""
    folder = folder or lock_folder()
    _safe_folder(os.path.dirname(folder))
    _safe_folder(folder)
    taken = _taken_ids()
    generator = random.SystemRandom()
    for _ in range(_ATTEMPTS):
        index = generator.randrange(BLOCKS)
        first = RANGE_START + index * BLOCK_SIZE
        if not _is_free(first, taken):
            continue
        path = os.path.join(folder, f"block-{index}.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidBlock(first, fd, path)
    raise UidBlockError(f"no free block of uids after {_ATTEMPTS} tries (locks in {folder})")


__all__ = ["BLOCK_SIZE", "RANGE_START", "UidBlock", "UidBlockError", "lock_folder", "reserve_block"]
