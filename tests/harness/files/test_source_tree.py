"""The one reader of other people's files: paths stay inside, symlinks are refused, JSON is decoded under a budget."""

from __future__ import annotations

import io
import json
import os
import random
import zipfile
from pathlib import Path

import pytest

from harness.files import (
    JsonAllowance,
    ReadBudget,
    SourceTree,
    UnsafeFile,
    checkout_commit,
    dist_info_metadata,
    metadata_field,
    module_file,
    parse_python,
    read_named_json,
    require_version,
)


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


def test_a_file_the_user_names_is_read_through_their_link_under_the_budget(tmp_path: Path) -> None:
    (tmp_path / "blobs").mkdir()
    (tmp_path / "blobs" / "abc").write_text('{"env_id": "env_1"}')
    (tmp_path / "envs.json").symlink_to(tmp_path / "blobs" / "abc")  # as a Hub snapshot lays out its files
    assert read_named_json(tmp_path / "envs.json") == {"env_id": "env_1"}
    (tmp_path / "bomb.json").write_bytes(_bomb(200_000))
    with pytest.raises(UnsafeFile, match=r"bomb\.json: holds more than 100,000 JSON values"):
        read_named_json(tmp_path / "bomb.json", ReadBudget(max_values=100_000))
    with pytest.raises(UnsafeFile, match="bytes; the limit is 1,000"):
        read_named_json(tmp_path / "bomb.json", ReadBudget(max_bytes=1000))
    os.mkfifo(tmp_path / "pipe")
    for path in (tmp_path / "pipe", tmp_path / "blobs"):
        with pytest.raises(UnsafeFile, match="not a regular file"):
            read_named_json(path)
    with pytest.raises(UnsafeFile, match="no such file"):
        read_named_json(tmp_path / "missing.json")


def test_json_held_in_strings_shares_one_budget() -> None:
    allowance = JsonAllowance(ReadBudget(max_values=1000))
    assert allowance.decode('{"a": [1, 2]}', "record 1") == {"a": [1, 2]}
    hidden = json.loads('"' + "\\u005b\\u005d\\u002c" * 400 + '[]"')  # no bracket in the file's own bytes
    assert allowance.decode("[" + hidden + "]", "record 2") == [[]] * 401
    with pytest.raises(UnsafeFile, match=r"record 3: its JSON texts hold more than 1,000 values in all"):
        allowance.decode("[" + hidden + "]", "record 3")
    with pytest.raises(ValueError, match="unexpected"):  # not JSON: the caller reports it with its record
        JsonAllowance().decode("[1,", "record 4")
    with pytest.raises(UnsafeFile, match="levels deep"):
        JsonAllowance().decode("[" * 200 + "]" * 200, "record 5")


@pytest.mark.parametrize(
    "text", ["-" * 1_000_000 + "1", "a" + ".b" * 1_000_000, "(" * 300 + ")" * 300, "def f(:\n", "x = '\x00'\n"]
)
def test_python_that_does_not_parse_is_one_refusal_naming_the_file(text: str) -> None:
    with pytest.raises(UnsafeFile, match=r"^src/m\.py does not parse: "):
        parse_python(text, "src/m.py")


@pytest.mark.parametrize("name", ["/etc/passwd", "..x", "a..b", "a/b", "a.b/../../c", "", "a.", "1a", "a b"])
def test_a_module_a_source_names_must_be_a_dotted_module_name(name: str) -> None:
    with pytest.raises(UnsafeFile, match=r"^utils\.py: MAPPING names the module .* not a dotted module name"):
        module_file(name, "utils.py: MAPPING")
    assert module_file("pkg.sub.module", "utils.py: MAPPING") == "pkg/sub/module.py"


def test_a_wheels_metadata_is_found_beside_its_package_and_a_link_refused(tmp_path: Path) -> None:
    (tmp_path / "other-1.0.dist-info").mkdir()
    (tmp_path / "other-1.0.dist-info" / "METADATA").write_text("Name: other\nVersion: 1.0\n")
    (tmp_path / "pkg-2.0.dist-info").mkdir()
    (tmp_path / "pkg-2.0.dist-info" / "METADATA").write_text("Name: pkg\nVersion: 2.0\nLicense: MIT \n")
    text = dist_info_metadata(SourceTree(tmp_path), project="pkg")
    assert metadata_field(text, "Version") == "2.0" and metadata_field(text, "License") == "MIT"
    assert metadata_field(text, "Home-page") is None
    assert require_version("2026.3.23", "w") == "2026.3.23"
    with pytest.raises(UnsafeFile, match="is not a version number"):
        require_version("1.0\x1b]52;c;x\x07", "w")
    (tmp_path / "pkg-2.0.dist-info" / "METADATA").unlink()
    (tmp_path / "pkg-2.0.dist-info" / "METADATA").symlink_to(tmp_path / "other-1.0.dist-info" / "METADATA")
    with pytest.raises(UnsafeFile, match=r"pkg-2\.0\.dist-info/METADATA is a symbolic link"):
        dist_info_metadata(SourceTree(tmp_path), project="pkg")
