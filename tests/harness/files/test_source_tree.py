"""The one reader of other people's files: paths stay inside, symlinks are refused, JSON is decoded under a budget."""

from __future__ import annotations

import io
import os
import random
import zipfile
from pathlib import Path

import pytest

from harness.files import ReadBudget, SourceTree, UnsafeFile, checkout_commit


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "data" / "nested").mkdir(parents=True)
    (tmp_path / "data" / "tasks.json").write_text('[{"id": 1}, {"id": 2}]')
    (tmp_path / "data" / "rows.jsonl").write_text('{"a": 1}\n\n{"a": 2}\n')
    (tmp_path / "secret.txt").write_text("host secret")
    return tmp_path


def test_reads_json_text_and_lines_inside_the_root(tree: Path) -> None:
    source = SourceTree(tree)
    assert source.read_json("data/tasks.json") == [{"id": 1}, {"id": 2}]
    assert list(source.read_json_lines("data/rows.jsonl")) == [(1, {"a": 1}), (3, {"a": 2})]
    assert source.entries("data") == {"nested": "folder", "rows.jsonl": "file", "tasks.json": "file"}
    assert source.sub("data").read_json("tasks.json") == [{"id": 1}, {"id": 2}]


@pytest.mark.parametrize("relative", ["../secret.txt", "data/../../secret.txt", "/etc/passwd", "data\\x", "a\x00b"])
def test_a_path_that_leaves_the_root_is_refused(tree: Path, relative: str) -> None:
    with pytest.raises(UnsafeFile):
        SourceTree(tree / "data").read_bytes(relative)


def test_a_symlinked_file_or_folder_is_refused_with_its_path(tree: Path) -> None:
    outside = tree / "secret.txt"
    root = tree / "data"
    (root / "policy.md").symlink_to(outside)
    (root / "linked").symlink_to(tree)
    source = SourceTree(root)
    with pytest.raises(UnsafeFile, match=r"policy\.md is a symbolic link"):
        source.read_text("policy.md")
    with pytest.raises(UnsafeFile, match=r"policy\.md is a symbolic link"):
        source.exists("policy.md")
    with pytest.raises(UnsafeFile, match="linked is a symbolic link"):
        source.read_text("linked/secret.txt")
    assert source.entries()["policy.md"] == "symlink"


def test_a_file_over_its_size_limit_is_refused(tree: Path) -> None:
    (tree / "big.txt").write_bytes(b"x" * 2000)
    with pytest.raises(UnsafeFile, match="limit"):
        SourceTree(tree, budget=ReadBudget(max_bytes=1000)).read_text("big.txt")


def test_a_fifo_is_not_read(tree: Path) -> None:
    os.mkfifo(tree / "pipe")
    with pytest.raises(UnsafeFile, match="not a regular file"):
        SourceTree(tree).read_bytes("pipe")


def _bomb(values: int) -> bytes:
    rng = random.Random(1)
    parts = [b"["]
    for index in range(values):  # tiny arrays, with enough noise that the archive's ratio check lets it through
        parts.append(b"[]," if index % 50 else b"[%d]," % rng.randrange(10**9))
    parts.append(b"[]]")
    return b"".join(parts)


def test_an_amplification_bomb_in_a_wheel_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("pkg/tasks.json", _bomb(4_000_000))
    wheel = tmp_path / "bomb.whl"
    wheel.write_bytes(buffer.getvalue())
    source = SourceTree(wheel, budget=ReadBudget(max_values=500_000))
    with pytest.raises(UnsafeFile, match="more than 500,000 JSON values"):
        source.read_json("pkg/tasks.json")


def test_a_symlink_member_of_an_archive_is_refused(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        link = zipfile.ZipInfo("pkg/LICENSE")
        link.external_attr = (0o120777 << 16) | 0
        archive.writestr(link, "/etc/passwd")
    wheel = tmp_path / "links.whl"
    wheel.write_bytes(buffer.getvalue())
    with pytest.raises(UnsafeFile, match="symbolic link"):
        SourceTree(wheel).read_text("pkg/LICENSE")


def test_deep_json_is_refused(tree: Path) -> None:
    (tree / "deep.json").write_text("[" * 200 + "]" * 200)
    with pytest.raises(UnsafeFile, match="levels deep"):
        SourceTree(tree).read_json("deep.json")


def test_a_checkout_commit_is_validated(tree: Path) -> None:
    git = tree / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    commit = "a" * 40
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text(commit + "\n")
    assert checkout_commit(SourceTree(tree)) == commit
    (git / "HEAD").write_text("ref: ../../../etc/passwd\n")
    with pytest.raises(UnsafeFile, match="not a ref under refs/"):
        checkout_commit(SourceTree(tree))
    (git / "HEAD").write_text("ref: refs/heads/../../../../etc/passwd\n")
    with pytest.raises(UnsafeFile, match="not a ref under refs/"):
        checkout_commit(SourceTree(tree))
    (git / "HEAD").write_text("not a commit\n")
    with pytest.raises(UnsafeFile, match="not a commit id"):
        checkout_commit(SourceTree(tree))
    (git / "HEAD").unlink()
    (git / "HEAD").symlink_to(tree / "secret.txt")
    with pytest.raises(UnsafeFile, match="symbolic link"):
        checkout_commit(SourceTree(tree))
