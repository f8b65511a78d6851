"""The commit a checkout is at, read from its ``.git`` as text and validated: a source's ``HEAD`` that points
outside ``.git``, or holds anything but a commit id or a ref under ``refs/``, is refused."""

from __future__ import annotations

import re

from harness.files.budget import UnsafeFile
from harness.files.tree import FOLDER, SourceTree

_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_REF = re.compile(r"refs/[A-Za-z0-9._\-]+(?:/[A-Za-z0-9._\-]+)*")
_GIT_FILE_BYTES = 64 << 10
_PACKED_REFS_BYTES = 16 << 20


def require_commit(text: str, where: str) -> str:
    """``text`` if it is a commit id (40 or 64 lowercase hex digits)."""
    if not _COMMIT.fullmatch(text):
        raise UnsafeFile(f"{where}: {text[:80]!r} is not a commit id")
    return text


def require_ref(text: str, where: str) -> str:
    """``text`` if it names a ref under ``refs/`` (no ``..``, no empty or dot-only segment)."""
    parts = text.split("/")
    if not _REF.fullmatch(text) or any(part in (".", "..") or part.endswith(".lock") for part in parts):
        raise UnsafeFile(f"{where}: {text[:80]!r} is not a ref under refs/")
    return text


def checkout_commit(tree: SourceTree) -> str | None:
    """The commit ``tree``'s ``.git`` says it is at; None when it has no ``.git`` folder (a ``.git`` file, as in
    a worktree, points elsewhere and is not followed) or names a ref that has no commit."""
    if tree.kind(".git") != FOLDER or not tree.exists(".git/HEAD"):  # a symlinked HEAD is refused
        return None
    where = tree.where(".git/HEAD")
    head = tree.read_text(".git/HEAD", max_bytes=_GIT_FILE_BYTES).strip()
    if not head.startswith("ref:"):
        return require_commit(head, where)
    ref = require_ref(head[len("ref:") :].strip(), where)
    if tree.exists(f".git/{ref}"):
        return require_commit(
            tree.read_text(f".git/{ref}", max_bytes=_GIT_FILE_BYTES).strip(), tree.where(f".git/{ref}")
        )
    if tree.exists(".git/packed-refs"):
        for line in tree.read_text(".git/packed-refs", max_bytes=_PACKED_REFS_BYTES).splitlines():
            commit, _, name = line.strip().partition(" ")
            if name == ref:
                return require_commit(commit, tree.where(".git/packed-refs"))
    return None
