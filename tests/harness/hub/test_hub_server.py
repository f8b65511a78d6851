"""The Hub test server answers the real clients the way the Hub does (errors, history, ranges, LFS)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest
from huggingface_hub import CommitOperationAdd, HfApi, RepoFile, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tests.support import conftest_hub
from tests.support.conftest_hub import hf_datasets
from tests.support.hub_env import HUB_URL, TEST_TOKEN

AUTH = {"Authorization": f"Bearer {TEST_TOKEN}"}

# Fixtures shared by the Hub tests.
hub_server = conftest_hub.hub_server
hub = conftest_hub.hub
repo_id = conftest_hub.repo_id


def commit_files(repo: str, files: dict[str, bytes], message: str = "update", **kwargs) -> str:
    operations = [CommitOperationAdd(path_in_repo=path, path_or_fileobj=data) for path, data in files.items()]
    info = HfApi().create_commit(repo, operations, commit_message=message, repo_type="dataset", **kwargs)
    return str(info.oid)


def test_missing_things_raise_the_clients_typed_errors(hub, repo_id):
    api = HfApi()
    with pytest.raises(RepositoryNotFoundError):
        api.dataset_info(repo_id)
    api.create_repo(repo_id, repo_type="dataset")
    with pytest.raises(RevisionNotFoundError):
        api.dataset_info(repo_id, revision="no-such-branch")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(repo_id, "missing.txt", repo_type="dataset")
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree(repo_id, "no/such/folder", repo_type="dataset"))
    response = httpx.get(f"{HUB_URL}/api/datasets/{repo_id}/tree/main/nowhere")
    assert response.status_code == 404 and response.headers["X-Error-Code"] == "EntryNotFound"
    with pytest.raises(HfHubHTTPError) as caught:
        api.create_repo(repo_id, repo_type="dataset")
    assert caught.value.response.status_code == 409


def test_history_is_kept_and_old_revisions_resolve(hub, repo_id):
    api = HfApi()
    api.create_repo(repo_id, repo_type="dataset")
    first = commit_files(repo_id, {"notes/a.txt": b"one"}, "first")
    second = commit_files(repo_id, {"notes/a.txt": b"two", "notes/deep/b.txt": b"bee"}, "second")
    commits = api.list_repo_commits(repo_id, repo_type="dataset")
    assert [c.commit_id for c in commits[:2]] == [second, first]
    assert [c.title for c in commits] == ["second", "first", "initial commit"]
    old = Path(hf_hub_download(repo_id, "notes/a.txt", repo_type="dataset", revision=first)).read_bytes()
    new = Path(hf_hub_download(repo_id, "notes/a.txt", repo_type="dataset")).read_bytes()
    assert (old, new) == (b"one", b"two")
    assert api.dataset_info(repo_id, revision=first[:8]).sha == first
    assert api.list_repo_files(repo_id, repo_type="dataset", revision=first) == [".gitattributes", "notes/a.txt"]

    top = [(e.path, type(e).__name__) for e in api.list_repo_tree(repo_id, "notes", repo_type="dataset")]
    assert top == [("notes/deep", "RepoFolder"), ("notes/a.txt", "RepoFile")]
    everything = {e.path for e in api.list_repo_tree(repo_id, repo_type="dataset", recursive=True)}
    assert everything == {".gitattributes", "notes", "notes/a.txt", "notes/deep", "notes/deep/b.txt"}
    expanded = list(api.list_repo_tree(repo_id, "notes", repo_type="dataset", expand=True))
    assert {e.path: e.last_commit.oid for e in expanded if e.last_commit} == {
        "notes/deep": second,
        "notes/a.txt": second,
    }
    infos = api.get_paths_info(repo_id, ["notes/a.txt", "notes/deep", "nope"], repo_type="dataset")
    assert [i.path for i in infos] == ["notes/a.txt", "notes/deep"]


def test_stale_parent_commit_is_refused_with_412(hub, repo_id):
    HfApi().create_repo(repo_id, repo_type="dataset")
    first = commit_files(repo_id, {"a.txt": b"1"})
    commit_files(repo_id, {"a.txt": b"2"})
    with pytest.raises(HfHubHTTPError) as caught:
        commit_files(repo_id, {"a.txt": b"3"}, parent_commit=first)
    assert caught.value.response.status_code == 412


def test_resolve_serves_lfs_headers_and_byte_ranges(hub, repo_id):
    HfApi().create_repo(repo_id, repo_type="dataset")
    payload = bytes(range(256)) * 40
    sha = commit_files(repo_id, {"blob.parquet": payload, "small.txt": b"hello"})
    url = f"{HUB_URL}/datasets/{repo_id}/resolve/main/blob.parquet"
    with httpx.Client(headers=AUTH) as client:  # one keep-alive connection for all requests
        head = client.head(url)
        assert head.status_code == 200
        assert head.headers["X-Repo-Commit"] == sha
        assert head.headers["X-Linked-Etag"] == f'"{hashlib.sha256(payload).hexdigest()}"'
        assert head.headers["X-Linked-Size"] == str(len(payload))
        assert head.headers["Content-Length"] == str(len(payload))
        ranged = client.get(url, headers={"Range": "bytes=10-19"})
        assert ranged.status_code == 206 and ranged.content == payload[10:20]
        assert ranged.headers["Content-Range"] == f"bytes 10-19/{len(payload)}"
        assert client.get(url, headers={"Range": "bytes=-4"}).content == payload[-4:]
        small = client.head(f"{HUB_URL}/datasets/{repo_id}/resolve/{sha}/small.txt")
        assert "X-Linked-Etag" not in small.headers and small.headers["ETag"].strip('"') != ""
        for _ in range(20):
            assert client.get(f"{HUB_URL}/datasets/{repo_id}/resolve/main/small.txt").content == b"hello"
    tree = {e.path: e for e in HfApi().list_repo_tree(repo_id, repo_type="dataset") if isinstance(e, RepoFile)}
    assert tree["blob.parquet"].lfs is not None and tree["small.txt"].lfs is None


def test_invalid_card_yaml_is_refused(hub, repo_id):
    HfApi().create_repo(repo_id, repo_type="dataset")
    with pytest.raises((ValueError, HfHubHTTPError)):
        commit_files(repo_id, {"README.md": b"---\nconfigs: [unclosed\n---\n# card\n"})
    assert hub.commit_count(repo_id) == 1


def test_writes_need_a_token(hub, repo_id):
    with pytest.raises(HfHubHTTPError) as caught:
        HfApi(token=False).create_repo(repo_id, repo_type="dataset")
    assert caught.value.response.status_code == 401


def test_datasets_push_to_hub_and_load_dataset_round_trip(hub, repo_id):
    rows = [{"id": i, "text": f"row {i}", "tags": ["a", "b"][: i % 3]} for i in range(50)]
    hf_datasets.Dataset.from_list(rows).push_to_hub(repo_id, config_name="extra")
    loaded = hf_datasets.load_dataset(repo_id, "extra", split="train")
    assert loaded.to_list() == rows
    files = HfApi().list_repo_files(repo_id, repo_type="dataset")
    assert "README.md" in files and any(f.endswith(".parquet") for f in files)


def test_tree_listing_is_paginated_like_the_hub(hub, repo_id):
    api = HfApi()
    api.create_repo(repo_id, repo_type="dataset")
    commit_files(repo_id, {f"data/part-{i:02d}.txt": str(i).encode() for i in range(7)})
    full = [e.path for e in api.list_repo_tree(repo_id, repo_type="dataset", recursive=True)]
    hub.tree_page_size = 3
    try:
        hub.reset_log()
        paged = [e.path for e in api.list_repo_tree(repo_id, repo_type="dataset", recursive=True)]
        pages = hub.endpoint_counts()["tree"]
    finally:
        hub.tree_page_size = 1000
    assert paged == full and len(full) == 9  # .gitattributes, data/, 7 files
    assert pages == 3
