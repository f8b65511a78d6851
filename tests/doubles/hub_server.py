"""A Hugging Face Hub-compatible HTTP server for tests.

It implements the part of the Hub API that ``huggingface_hub`` (create_repo, upload_folder / create_commit,
list_repo_files, list_repo_tree, list_repo_refs, create_branch, list_repo_commits, hf_hub_download,
snapshot_download) and ``datasets`` (push_to_hub, load_dataset) call, with real git-like history: every
commit is an immutable snapshot with a sha, branches are pointers, so pinned revisions keep resolving after
newer commits. File contents live in a temporary folder keyed by sha256; repo metadata is written there as
JSON after each change.

Faults can be injected per endpoint (``server.faults.fail("commit", times=1, status=500)``) to test
interrupted publishes.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode

import yaml
from aiohttp import web

REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
LFS_EXTENSIONS = (".parquet", ".arrow", ".bin", ".safetensors", ".pt", ".gguf", ".zip", ".gz", ".npy")
REGULAR_SIZE_LIMIT = 10 * 1024 * 1024
GITATTRIBUTES = "*.parquet filter=lfs diff=lfs merge=lfs -text\n*.arrow filter=lfs diff=lfs merge=lfs -text\n"
SHA_RE = re.compile(r"^[0-9a-f]{40}$")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str
    lfs: bool
    oid: str
    """The git blob id: of the content for regular files, of the pointer for LFS files."""

    @classmethod
    def regular(cls, data: bytes, sha256: str) -> FileEntry:
        return cls(size=len(data), sha256=sha256, lfs=False, oid=git_blob_sha1(data))

    @classmethod
    def large(cls, sha256: str, size: int) -> FileEntry:
        return cls(size=size, sha256=sha256, lfs=True, oid=git_blob_sha1(lfs_pointer(sha256, size)))

    @property
    def remote_oid(self) -> str:
        """What preupload answers as ``oid``: sha256 for LFS files, the git blob sha1 otherwise."""
        return self.sha256 if self.lfs else self.oid

    def api_dict(self, path: str) -> dict[str, Any]:
        data: dict[str, Any] = {"type": "file", "oid": self.oid, "size": self.size, "path": path}
        if self.lfs:
            data["lfs"] = {
                "oid": self.sha256,
                "size": self.size,
                "pointerSize": len(lfs_pointer(self.sha256, self.size)),
            }
        return data


@dataclass
class Commit:
    id: str
    parent: str | None
    tree: dict[str, FileEntry]
    title: str
    message: str
    date: datetime
    author: str = "tester"


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    created_at: datetime
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)
    lfs_objects: set[str] = field(default_factory=set)
    """LFS objects uploaded to this repo (the batch API answers per repo, like the Hub)."""

    def resolve(self, revision: str) -> str | None:
        """Commit sha for a branch, tag, full sha or unique sha prefix (>= 7 characters)."""
        revision = revision.removeprefix("refs/heads/").removeprefix("refs/tags/")
        if revision in self.branches:
            return self.branches[revision]
        if revision in self.tags:
            return self.tags[revision]
        if revision in self.commits:
            return revision
        if len(revision) >= 7 and re.fullmatch(r"[0-9a-f]+", revision):
            matches = [sha for sha in self.commits if sha.startswith(revision)]
            if len(matches) == 1:
                return matches[0]
        return None

    def history(self, sha: str) -> list[Commit]:
        commits = []
        current: str | None = sha
        while current is not None:
            commit = self.commits[current]
            commits.append(commit)
            current = commit.parent
        return commits


class HubError(Exception):
    def __init__(self, status: int, message: str, error_code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_code = error_code


class Faults:
    """Failures to inject: the next ``times`` requests to ``endpoint`` answer ``status``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, list[int]] = {}

    def fail(self, endpoint: str, times: int = 1, status: int = 500) -> None:
        with self._lock:
            self._pending.setdefault(endpoint, []).extend([status] * times)

    def take(self, endpoint: str) -> int | None:
        with self._lock:
            queue = self._pending.get(endpoint)
            if queue:
                return queue.pop(0)
            return None

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()


@dataclass
class RequestRecord:
    method: str
    endpoint: str
    path: str
    status: int


class HubStore:
    """Repos, commits and file contents. All methods are called under the server's lock."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.objects = root / "objects"
        self.objects.mkdir(parents=True, exist_ok=True)
        (root / "repos").mkdir(exist_ok=True)
        self.repos: dict[tuple[str, str], Repo] = {}
        self._clock = 0

    # ---------------------------------------------------------------------------------------- contents

    def put_object(self, data: bytes) -> str:
        sha256 = hashlib.sha256(data).hexdigest()
        path = self.objects / sha256
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        return sha256

    def has_object(self, sha256: str, size: int | None = None) -> bool:
        path = self.objects / sha256
        return path.exists() and (size is None or path.stat().st_size == size)

    def object_path(self, sha256: str) -> Path:
        return self.objects / sha256

    def regular_entry(self, data: bytes) -> FileEntry:
        return FileEntry.regular(data, self.put_object(data))

    # ------------------------------------------------------------------------------------------- repos

    def get_repo(self, repo_type: str, repo_id: str) -> Repo:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None:
            raise HubError(404, "Repository not found", "RepoNotFound")
        return repo

    def create_repo(self, repo_type: str, repo_id: str, private: bool) -> Repo:
        if (repo_type, repo_id) in self.repos:
            raise HubError(409, f"You already created this {repo_type} repo")
        now = self.now()
        repo = Repo(repo_type=repo_type, repo_id=repo_id, private=private, created_at=now)
        initial = self.make_commit(
            repo, None, {".gitattributes": self.regular_entry(GITATTRIBUTES.encode())}, "initial commit", ""
        )
        repo.branches["main"] = initial.id
        self.repos[(repo_type, repo_id)] = repo
        self.persist(repo)
        return repo

    def now(self) -> datetime:
        return datetime.now(UTC)

    def make_commit(
        self, repo: Repo, parent: str | None, tree: dict[str, FileEntry], title: str, message: str
    ) -> Commit:
        date = self.now()
        # The counter keeps commit ids unique even for identical trees made within one clock tick.
        self._clock += 1
        digest = hashlib.sha1()
        digest.update(f"{repo.repo_type}/{repo.repo_id}\n{parent}\n{title}\n{message}\n{date.isoformat()}\n".encode())
        digest.update(str(self._clock).encode())
        for path in sorted(tree):
            digest.update(f"{path}\0{tree[path].oid}\n".encode())
        commit = Commit(id=digest.hexdigest(), parent=parent, tree=dict(tree), title=title, message=message, date=date)
        repo.commits[commit.id] = commit
        return commit

    def persist(self, repo: Repo) -> None:
        data = {
            "repo_type": repo.repo_type,
            "repo_id": repo.repo_id,
            "private": repo.private,
            "branches": repo.branches,
            "tags": repo.tags,
            "commits": {
                sha: {
                    "parent": commit.parent,
                    "title": commit.title,
                    "date": iso(commit.date),
                    "tree": {path: entry.api_dict(path) for path, entry in commit.tree.items()},
                }
                for sha, commit in repo.commits.items()
            },
        }
        path = self.root / "repos" / repo.repo_type / f"{repo.repo_id.replace('/', '__')}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)


def split_repo_path(segments: list[str]) -> tuple[str, list[str]]:
    """``[ns, name, *rest]`` → ("ns/name", rest). A namespace-less id is not supported by the Hub for datasets."""
    if len(segments) < 2:
        raise HubError(404, "Repository not found", "RepoNotFound")
    return f"{segments[0]}/{segments[1]}", segments[2:]


class HubServer:
    """The server. ``start()`` runs it in a background thread; ``url`` is what ``HF_ENDPOINT`` should be."""

    def __init__(self, root: Path, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        self.root = Path(root)
        self.host = host
        self.port = port
        self.token = token
        self.store = HubStore(self.root)
        self.faults = Faults()
        self.requests: list[RequestRecord] = []
        self.authorizations: Counter[str] = Counter()
        self.tree_page_size = 1000
        """Entries per page of a tree listing (the Hub's is 1000, and 50 with ``expand``)."""
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None

    # ------------------------------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> HubServer:
        self._thread = threading.Thread(target=self._run, name="hub-test-server", daemon=True)
        self._thread.start()
        self._started.wait(timeout=30)
        if self._start_error is not None:
            raise RuntimeError(f"hub test server failed to start: {self._start_error}") from self._start_error
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._loop = None

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            app = web.Application(client_max_size=1024**3)
            app.router.add_route("*", "/{tail:.*}", self._dispatch)
            self._runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
            loop.run_until_complete(site.start())
            if self.port == 0:
                server = site._server
                assert server is not None
                self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        except BaseException as error:
            self._start_error = error
            self._started.set()
            return
        self._started.set()
        loop.run_forever()
        loop.close()

    # --------------------------------------------------------------------------------------- inspection

    def repo(self, repo_id: str, repo_type: str = "dataset") -> Repo:
        with self._lock:
            return self.store.get_repo(repo_type, repo_id)

    def commit_count(self, repo_id: str, revision: str = "main", repo_type: str = "dataset") -> int:
        with self._lock:
            repo = self.store.get_repo(repo_type, repo_id)
            sha = repo.resolve(revision)
            assert sha is not None, revision
            return len(repo.history(sha))

    def endpoint_counts(self) -> Counter[str]:
        with self._lock:
            return Counter(record.endpoint for record in self.requests)

    def reset_log(self) -> None:
        with self._lock:
            self.requests.clear()
            self.authorizations.clear()

    # ------------------------------------------------------------------------------------------ routing

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        # Always read the body, or the next request on this keep-alive connection breaks.
        body = await request.read()
        raw_path = request.rel_url.raw_path
        segments = [unquote(part) for part in raw_path.strip("/").split("/")] if raw_path.strip("/") else []
        query = {key: values[-1] for key, values in parse_qs(request.rel_url.raw_query_string).items()}
        authorization = request.headers.get("Authorization", "")
        endpoint = "unknown"
        try:
            endpoint, handler = self._route(request.method, segments)
            with self._lock:
                if authorization.startswith("Bearer "):
                    self.authorizations[authorization.removeprefix("Bearer ")] += 1
                injected = self.faults.take(endpoint)
            if injected is not None:
                raise HubError(injected, f"Injected failure on {endpoint}")
            with self._lock:
                response = handler(request, segments, query, body)
        except HubError as error:
            response = self._error_response(request, error)
        except Exception as error:  # a bug in the server: answer 500 with the reason, keep serving
            response = self._error_response(request, HubError(500, f"test server error: {error!r}"))
        with self._lock:
            self.requests.append(RequestRecord(request.method, endpoint, raw_path, response.status))
        return response

    def _error_response(self, request: web.Request, error: HubError) -> web.Response:
        headers = {"X-Error-Message": error.message}
        if error.error_code:
            headers["X-Error-Code"] = error.error_code
        if request.method == "HEAD":
            return web.Response(status=error.status, headers=headers)
        return web.json_response({"error": error.message}, status=error.status, headers=headers)

    def _route(self, method: str, segments: list[str]) -> tuple[str, Any]:
        if not segments:
            raise HubError(404, "Not found")
        if segments[0] == "api":
            return self._route_api(method, segments[1:])
        if segments[0] == "lfs-upload" and method == "PUT":
            return "lfs_upload", self._lfs_upload
        if segments[0] == "lfs-verify" and method == "POST":
            return "lfs_verify", self._lfs_verify
        # /{prefix}{ns}/{name}/resolve/{rev}/{path} and /{prefix}{ns}/{name}.git/info/lfs/objects/batch
        repo_type, rest = ("model", segments)
        if segments[0] in ("datasets", "spaces"):
            repo_type, rest = REPO_TYPES[segments[0]], segments[1:]
        if len(rest) >= 5 and rest[1].endswith(".git") and rest[2:5] == ["info", "lfs", "objects"]:
            return "lfs_batch", self._wrap(self._lfs_batch, repo_type, rest)
        if len(rest) >= 4 and rest[2] == "resolve" and method in ("GET", "HEAD"):
            return "resolve", self._wrap(self._resolve, repo_type, rest)
        raise HubError(404, "Not found")

    def _route_api(self, method: str, segments: list[str]) -> tuple[str, Any]:
        if segments == ["repos", "create"] and method == "POST":
            return "create_repo", self._create_repo
        if segments == ["repos", "delete"] and method == "DELETE":
            return "delete_repo", self._delete_repo
        if segments == ["validate-yaml"] and method == "POST":
            return "validate_yaml", self._validate_yaml
        if segments == ["whoami-v2"]:
            return "whoami", self._whoami
        if not segments or segments[0] not in REPO_TYPES:
            raise HubError(404, "Not found")
        repo_type = REPO_TYPES[segments[0]]
        repo_id, rest = split_repo_path(segments[1:])
        action = rest[0] if rest else None
        routes: dict[tuple[str | None, str], tuple[str, Any]] = {
            (None, "GET"): ("repo_info", self._repo_info),
            ("revision", "GET"): ("repo_info", self._repo_info),
            ("preupload", "POST"): ("preupload", self._preupload),
            ("commit", "POST"): ("commit", self._commit),
            ("tree", "GET"): ("tree", self._tree),
            ("paths-info", "POST"): ("paths_info", self._paths_info),
            ("refs", "GET"): ("refs", self._refs),
            ("commits", "GET"): ("commits", self._commits),
            ("branch", "POST"): ("create_branch", self._create_branch),
            ("branch", "DELETE"): ("delete_branch", self._delete_branch),
            ("tag", "POST"): ("create_tag", self._create_tag),
            ("settings", "PUT"): ("update_settings", self._update_settings),
        }
        route = routes.get((action, method))
        if route is None:
            raise HubError(404, f"Not found: {method} api/{segments[0]}/{repo_id}/{action}")
        name, handler = route
        return name, self._wrap_api(handler, repo_type, repo_id, rest[1:])

    def _wrap(self, handler: Any, repo_type: str, rest: list[str]) -> Any:
        def call(request: web.Request, _segments: list[str], query: dict[str, str], body: bytes) -> web.Response:
            repo_id = f"{rest[0]}/{rest[1].removesuffix('.git')}"
            return handler(request, repo_type, repo_id, rest[3:], query, body)

        return call

    def _wrap_api(self, handler: Any, repo_type: str, repo_id: str, rest: list[str]) -> Any:
        def call(request: web.Request, _segments: list[str], query: dict[str, str], body: bytes) -> web.Response:
            return handler(request, repo_type, repo_id, rest, query, body)

        return call

    # ------------------------------------------------------------------------------------------- helpers

    def _require_write(self, request: web.Request) -> None:
        authorization = request.headers.get("Authorization", "")
        if not authorization.startswith("Bearer "):
            raise HubError(401, "Invalid credentials in Authorization header")
        if self.token is not None and authorization.removeprefix("Bearer ") != self.token:
            raise HubError(401, "Invalid credentials in Authorization header")

    def _readable_repo(self, request: web.Request, repo_type: str, repo_id: str) -> Repo:
        repo = self.store.get_repo(repo_type, repo_id)
        if repo.private:
            authorization = request.headers.get("Authorization", "")
            token_ok = authorization.startswith("Bearer ") and (
                self.token is None or authorization.removeprefix("Bearer ") == self.token
            )
            if not token_ok:
                raise HubError(401, "Repository not found", "RepoNotFound")
        return repo

    @staticmethod
    def _resolve_revision(repo: Repo, revision: str) -> Commit:
        sha = repo.resolve(revision)
        if sha is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo.commits[sha]

    def _repo_url(self, repo: Repo) -> str:
        return f"{self.url}/{URL_PREFIXES[repo.repo_type]}{repo.repo_id}"

    @staticmethod
    def _json_body(body: bytes) -> dict[str, Any]:
        if not body:
            return {}
        try:
            data = json.loads(body)
        except json.JSONDecodeError as error:
            raise HubError(400, f"Invalid JSON body: {error}") from error
        if not isinstance(data, dict):
            raise HubError(400, "JSON body must be an object")
        return data

    @staticmethod
    def _card_data(commit: Commit, store: HubStore) -> dict[str, Any] | None:
        entry = commit.tree.get("README.md")
        if entry is None:
            return None
        text = store.object_path(entry.sha256).read_text(encoding="utf-8", errors="replace")
        match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, re.DOTALL)
        if not match:
            return None
        try:
            data = yaml.safe_load(match.group(1))
        except yaml.YAMLError:
            return None
        return data if isinstance(data, dict) else None

    # ------------------------------------------------------------------------------------------ handlers

    def _whoami(self, request: web.Request, *_: Any) -> web.Response:
        self._require_write(request)
        return web.json_response(
            {
                "type": "user",
                "id": "0" * 24,
                "name": "tester",
                "fullname": "Test User",
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": "write"}},
            }
        )

    def _create_repo(self, request: web.Request, _s: list[str], _q: dict[str, str], body: bytes) -> web.Response:
        self._require_write(request)
        payload = self._json_body(body)
        name = payload.get("name")
        if not isinstance(name, str) or not name:
            raise HubError(400, "A repo name is required")
        organization = payload.get("organization") or "tester"
        repo_type = payload.get("type") or "model"
        if repo_type not in URL_PREFIXES:
            raise HubError(400, f"Invalid repo type {repo_type}")
        private = bool(payload.get("private")) or payload.get("visibility") == "private"
        repo_id = f"{organization}/{name}"
        existing = self.store.repos.get((repo_type, repo_id))
        if existing is not None:
            return web.json_response(
                {"error": f"You already created this {repo_type} repo", "url": self._repo_url(existing)},
                status=409,
            )
        repo = self.store.create_repo(repo_type, repo_id, private)
        return web.json_response({"url": self._repo_url(repo), "name": repo_id, "id": repo_id})

    def _delete_repo(self, request: web.Request, _s: list[str], _q: dict[str, str], body: bytes) -> web.Response:
        self._require_write(request)
        payload = self._json_body(body)
        repo_type = payload.get("type") or "model"
        repo_id = f"{payload.get('organization') or 'tester'}/{payload.get('name')}"
        self.store.get_repo(repo_type, repo_id)
        del self.store.repos[(repo_type, repo_id)]
        return web.json_response({})

    def _update_settings(
        self, request: web.Request, repo_type: str, repo_id: str, _rest: list[str], _q: dict[str, str], body: bytes
    ) -> web.Response:
        self._require_write(request)
        repo = self._readable_repo(request, repo_type, repo_id)
        payload = self._json_body(body)
        visibility = payload.get("visibility")
        if "private" in payload:
            repo.private = bool(payload["private"])
        elif visibility in ("private", "public"):
            repo.private = visibility == "private"
        elif visibility is not None:
            raise HubError(400, f"Invalid visibility {visibility!r}")
        return web.json_response({})

    def _validate_yaml(self, request: web.Request, _s: list[str], _q: dict[str, str], body: bytes) -> web.Response:
        payload = self._json_body(body)
        content = payload.get("content", "")
        match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", content, re.DOTALL)
        if match is None:
            return web.json_response(
                {"errors": [], "warnings": [{"message": "Empty or missing yaml metadata in repo card"}]}
            )
        try:
            metadata = yaml.safe_load(match.group(1))
        except yaml.YAMLError as error:
            return web.json_response({"error": f"Invalid YAML in README.md: {error}"}, status=400)
        if not isinstance(metadata, dict):
            return web.json_response({"error": "README.md metadata must be a mapping"}, status=400)
        return web.json_response({"errors": [], "warnings": []})

    def _repo_info(
        self, request: web.Request, repo_type: str, repo_id: str, rest: list[str], _q: dict[str, str], _b: bytes
    ) -> web.Response:
        repo = self._readable_repo(request, repo_type, repo_id)
        revision = "/".join(rest) if rest else "main"
        commit = self._resolve_revision(repo, revision)
        siblings = []
        for path in sorted(commit.tree):
            entry = commit.tree[path]
            sibling: dict[str, Any] = {"rfilename": path, "size": entry.size, "blobId": entry.oid}
            if entry.lfs:
                sibling["lfs"] = {
                    "size": entry.size,
                    "sha256": entry.sha256,
                    "pointerSize": len(lfs_pointer(entry.sha256, entry.size)),
                }
            siblings.append(sibling)
        card_data = self._card_data(commit, self.store)
        info: dict[str, Any] = {
            "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
            "id": repo_id,
            "author": repo_id.split("/")[0],
            "sha": commit.id,
            "lastModified": iso(commit.date),
            "createdAt": iso(repo.created_at),
            "private": repo.private,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": list((card_data or {}).get("tags") or []),
            "siblings": siblings,
        }
        if card_data is not None:
            info["cardData"] = card_data
        return web.json_response(info)

    def _preupload(
        self, request: web.Request, repo_type: str, repo_id: str, rest: list[str], _q: dict[str, str], body: bytes
    ) -> web.Response:
        self._require_write(request)
        repo = self.store.get_repo(repo_type, repo_id)
        commit = self._resolve_revision(repo, "/".join(rest) or "main")
        answers = []
        for item in self._json_body(body).get("files", []):
            path, size = item["path"], int(item["size"])
            sample = base64.b64decode(item.get("sample", ""))
            is_lfs = path.endswith(LFS_EXTENSIONS) or size > REGULAR_SIZE_LIMIT or b"\0" in sample
            answer: dict[str, Any] = {
                "path": path,
                "uploadMode": "lfs" if is_lfs else "regular",
                "shouldIgnore": False,
            }
            existing = commit.tree.get(path)
            answer["oid"] = existing.remote_oid if existing is not None else None
            answers.append(answer)
        return web.json_response({"files": answers, "commitOid": commit.id})

    def _lfs_batch(
        self, request: web.Request, repo_type: str, repo_id: str, rest: list[str], _q: dict[str, str], body: bytes
    ) -> web.Response:
        self._require_write(request)
        repo = self.store.get_repo(repo_type, repo_id)
        payload = self._json_body(body)
        if payload.get("operation") != "upload":
            raise HubError(400, "Only the upload operation is supported")
        objects = []
        for item in payload.get("objects", []):
            oid, size = str(item["oid"]), int(item["size"])
            entry: dict[str, Any] = {"oid": oid, "size": size, "authenticated": True}
            if oid not in repo.lfs_objects or not self.store.has_object(oid, size):
                target = f"{repo.repo_type}/{repo.repo_id}/{oid}"
                entry["actions"] = {
                    "upload": {"href": f"{self.url}/lfs-upload/{target}", "header": {}},
                    "verify": {"href": f"{self.url}/lfs-verify/{target}", "header": {}},
                }
            objects.append(entry)
        return web.json_response({"transfer": "basic", "objects": objects}, content_type="application/vnd.git-lfs+json")

    def _lfs_target(self, segments: list[str]) -> tuple[Repo, str]:
        # /lfs-upload/{type}/{ns}/{name}/{oid}
        if len(segments) != 5:
            raise HubError(404, "Not found")
        return self.store.get_repo(segments[1], f"{segments[2]}/{segments[3]}"), segments[4]

    def _lfs_upload(self, request: web.Request, segments: list[str], _q: dict[str, str], body: bytes) -> web.Response:
        repo, oid = self._lfs_target(segments)
        actual = hashlib.sha256(body).hexdigest()
        if actual != oid:
            raise HubError(400, f"Uploaded content has sha256 {actual}, expected {oid}")
        self.store.put_object(body)
        repo.lfs_objects.add(oid)
        return web.Response(status=200, headers={"ETag": f'"{oid}"'})

    def _lfs_verify(self, request: web.Request, segments: list[str], _q: dict[str, str], body: bytes) -> web.Response:
        repo, _oid = self._lfs_target(segments)
        payload = self._json_body(body)
        oid, size = payload.get("oid"), payload.get("size")
        if not isinstance(oid, str) or oid not in repo.lfs_objects:
            raise HubError(404, f"LFS object {oid} was not uploaded to {repo.repo_id}")
        if not self.store.has_object(oid, size if isinstance(size, int) else None):
            raise HubError(400, f"LFS object {oid} does not have size {size}")
        return web.json_response({"success": True})

    def _commit(
        self, request: web.Request, repo_type: str, repo_id: str, rest: list[str], query: dict[str, str], body: bytes
    ) -> web.Response:
        self._require_write(request)
        repo = self.store.get_repo(repo_type, repo_id)
        if query.get("create_pr") in ("1", "true"):
            raise HubError(400, "Pull requests are not supported by the test server")
        branch = "/".join(rest) or "main"
        branch = branch.removeprefix("refs/heads/")
        if branch not in repo.branches:
            if repo.resolve(branch) is not None:
                raise HubError(400, f"Cannot commit to {branch}: not a branch")
            raise HubError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
        head = repo.commits[repo.branches[branch]]
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "The first NDJSON line must be the commit header")
        header = lines[0]["value"]
        parent_commit = header.get("parentCommit")
        if parent_commit and repo.resolve(parent_commit) != head.id:
            raise HubError(412, "A commit has happened since. Please refresh and try again.")
        tree = dict(head.tree)
        for line in lines[1:]:
            key, value = line.get("key"), line.get("value", {})
            path = value.get("path", "")
            if key == "file":
                if value.get("encoding", "base64") != "base64":
                    raise HubError(400, f"Unsupported encoding for {path}")
                tree[path] = self.store.regular_entry(base64.b64decode(value["content"]))
            elif key == "lfsFile":
                oid = value["oid"]
                if oid not in repo.lfs_objects or not self.store.has_object(oid):
                    raise HubError(422, f"LFS object {oid} for {path} was never uploaded")
                size = self.store.object_path(oid).stat().st_size
                tree[path] = FileEntry.large(oid, size)
            elif key == "deletedFile":
                if path not in tree:
                    raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                del tree[path]
            elif key == "deletedFolder":
                prefix = path.rstrip("/") + "/"
                doomed = [name for name in tree if name.startswith(prefix)]
                if not doomed:
                    raise HubError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
                for name in doomed:
                    del tree[name]
            else:
                raise HubError(400, f"Unknown commit operation {key!r}")
        summary = header.get("summary") or "Update"
        commit = self.store.make_commit(repo, head.id, tree, summary, header.get("description") or "")
        repo.branches[branch] = commit.id
        self.store.persist(repo)
        return web.json_response(
            {
                "success": True,
                "commitOid": commit.id,
                "commitUrl": f"{self._repo_url(repo)}/commit/{commit.id}",
                "hookOutput": "",
                "pullRequestUrl": None,
            }
        )

    @staticmethod
    def _folder_entries(tree: dict[str, FileEntry], folder: str) -> set[str]:
        prefix = folder + "/" if folder else ""
        return {path for path in tree if path.startswith(prefix)}

    def _entry_dict(self, repo: Repo, commit: Commit, path: str, expand: bool) -> dict[str, Any]:
        entry = commit.tree.get(path)
        if entry is not None:
            data = entry.api_dict(path)
        else:
            children = sorted(self._folder_entries(commit.tree, path))
            digest = hashlib.sha1("".join(f"{c}\0{commit.tree[c].oid}\n" for c in children).encode())
            data = {"type": "directory", "oid": digest.hexdigest(), "size": 0, "path": path}
        if expand:
            last = self._last_commit_touching(repo, commit, path)
            data["lastCommit"] = {"id": last.id, "title": last.title, "date": iso(last.date)}
            if entry is not None:
                data["securityFileStatus"] = {"status": "safe", "avScan": None, "pickleImportScan": None}
        return data

    @staticmethod
    def _last_commit_touching(repo: Repo, commit: Commit, path: str) -> Commit:
        def view(tree: dict[str, FileEntry]) -> list[tuple[str, str]]:
            prefix = path + "/"
            return sorted((p, e.oid) for p, e in tree.items() if p == path or p.startswith(prefix))

        current = commit
        target = view(commit.tree)
        while current.parent is not None:
            parent = repo.commits[current.parent]
            if view(parent.tree) != target:
                return current
            current = parent
        return current

    def _tree(
        self, request: web.Request, repo_type: str, repo_id: str, rest: list[str], query: dict[str, str], _b: bytes
    ) -> web.Response:
        repo = self._readable_repo(request, repo_type, repo_id)
        if not rest:
            raise HubError(404, "A revision is required")
        commit = self._resolve_revision(repo, rest[0])
        folder = "/".join(rest[1:]).strip("/")
        recursive = query.get("recursive", "false").lower() in ("1", "true")
        expand = query.get("expand", "false").lower() in ("1", "true")
        inside = self._folder_entries(commit.tree, folder)
        if folder and not inside:
            raise HubError(404, f"Entry not found: {folder}", "EntryNotFound")
        prefix_length = len(folder) + 1 if folder else 0
        listed: set[str] = set()
        for path in inside:
            parts = path[prefix_length:].split("/")
            for depth in range(1, len(parts) + 1):
                if not recursive and depth > 1:
                    break
                listed.add((folder + "/" if folder else "") + "/".join(parts[:depth]))
        # Like the Hub: folders before files, each in name order, in pages linked by a `Link: rel="next"` header.
        ordered = sorted(listed, key=lambda p: (p in commit.tree, p))
        page_size = self.tree_page_size if not expand else max(1, self.tree_page_size // 20)
        start = int(query.get("cursor", "0"))
        page = ordered[start : start + page_size]
        headers = {}
        if start + page_size < len(ordered):
            params = urlencode({**query, "cursor": str(start + page_size)})
            headers["Link"] = f'<{self.url}{request.rel_url.raw_path}?{params}>; rel="next"'
        return web.json_response([self._entry_dict(repo, commit, path, expand) for path in page], headers=headers)

    def _paths_info(
        self, request: web.Request, repo_type: str, repo_id: str, rest: list[str], _q: dict[str, str], body: bytes
    ) -> web.Response:
        repo = self._readable_repo(request, repo_type, repo_id)
        commit = self._resolve_revision(repo, "/".join(rest) or "main")
        content_type = request.headers.get("Content-Type", "")
        if content_type.startswith("application/json"):
            payload = self._json_body(body)
            paths = payload.get("paths", [])
            expand = bool(payload.get("expand"))
        else:
            form = parse_qs(body.decode())
            paths = form.get("paths", [])
            expand = (form.get("expand") or ["false"])[-1].lower() in ("1", "true")
        results = []
        for raw in paths:
            path = raw.strip("/")
            if path in commit.tree or (path and self._folder_entries(commit.tree, path)):
                results.append(self._entry_dict(repo, commit, path, expand))
        return web.json_response(results)

    def _refs(
        self, request: web.Request, repo_type: str, repo_id: str, _r: list[str], query: dict[str, str], _b: bytes
    ) -> web.Response:
        repo = self._readable_repo(request, repo_type, repo_id)
        data: dict[str, Any] = {
            "branches": [
                {"name": name, "ref": f"refs/heads/{name}", "targetCommit": sha}
                for name, sha in sorted(repo.branches.items())
            ],
            "tags": [
                {"name": name, "ref": f"refs/tags/{name}", "targetCommit": sha}
                for name, sha in sorted(repo.tags.items())
            ],
            "converts": [],
        }
        if query.get("include_prs"):
            data["pullRequests"] = []
        return web.json_response(data)

    def _commits(
        self, request: web.Request, repo_type: str, repo_id: str, rest: list[str], _q: dict[str, str], _b: bytes
    ) -> web.Response:
        repo = self._readable_repo(request, repo_type, repo_id)
        commit = self._resolve_revision(repo, "/".join(rest) or "main")
        return web.json_response(
            [
                {
                    "id": item.id,
                    "title": item.title,
                    "message": item.message,
                    "authors": [{"user": item.author}],
                    "date": iso(item.date),
                    "formatted": {"title": item.title, "message": item.message},
                }
                for item in repo.history(commit.id)
            ]
        )

    def _create_branch(
        self, request: web.Request, repo_type: str, repo_id: str, rest: list[str], _q: dict[str, str], body: bytes
    ) -> web.Response:
        self._require_write(request)
        repo = self.store.get_repo(repo_type, repo_id)
        branch = "/".join(rest)
        if not branch or branch.startswith("refs/"):
            raise HubError(400, f"Invalid branch name: {branch}")
        if branch in repo.branches:
            raise HubError(409, f"Branch {branch} already exists")
        starting_point = self._json_body(body).get("startingPoint") or "main"
        repo.branches[branch] = self._resolve_revision(repo, starting_point).id
        self.store.persist(repo)
        return web.json_response({})

    def _delete_branch(
        self, request: web.Request, repo_type: str, repo_id: str, rest: list[str], _q: dict[str, str], _b: bytes
    ) -> web.Response:
        self._require_write(request)
        repo = self.store.get_repo(repo_type, repo_id)
        branch = "/".join(rest)
        if branch not in repo.branches or branch == "main":
            raise HubError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
        del repo.branches[branch]
        self.store.persist(repo)
        return web.json_response({})

    def _create_tag(
        self, request: web.Request, repo_type: str, repo_id: str, rest: list[str], _q: dict[str, str], body: bytes
    ) -> web.Response:
        self._require_write(request)
        repo = self.store.get_repo(repo_type, repo_id)
        revision = "/".join(rest) or "main"
        payload = self._json_body(body)
        tag = payload.get("tag")
        if not isinstance(tag, str) or not tag:
            raise HubError(400, "A tag name is required")
        if tag in repo.tags:
            raise HubError(409, f"Tag {tag} already exists")
        repo.tags[tag] = self._resolve_revision(repo, revision).id
        self.store.persist(repo)
        return web.json_response({})

    def _resolve(
        self, request: web.Request, repo_type: str, repo_id: str, rest: list[str], _q: dict[str, str], _b: bytes
    ) -> web.Response:
        repo = self._readable_repo(request, repo_type, repo_id)
        if len(rest) < 2:
            raise HubError(404, "Entry not found", "EntryNotFound")
        commit = self._resolve_revision(repo, rest[0])
        path = "/".join(rest[1:])
        entry = commit.tree.get(path)
        if entry is None:
            raise HubError(404, "Entry not found", "EntryNotFound")
        headers = {
            "X-Repo-Commit": commit.id,
            "Accept-Ranges": "bytes",
            "ETag": f'"{entry.sha256 if entry.lfs else entry.oid}"',
            "Content-Type": "application/octet-stream",
        }
        if entry.lfs:
            headers["X-Linked-Etag"] = f'"{entry.sha256}"'
            headers["X-Linked-Size"] = str(entry.size)
        start, end, status = 0, entry.size - 1, 200
        range_header = request.headers.get("Range")
        if range_header and entry.size > 0:
            match = re.fullmatch(r"bytes=(\d*)-(\d*)", range_header.strip())
            if match is None:
                raise HubError(416, f"Invalid range {range_header}")
            first, last = match.groups()
            if first == "":
                start = max(entry.size - int(last), 0)
            else:
                start = int(first)
                end = min(int(last), entry.size - 1) if last else entry.size - 1
            if start >= entry.size or start > end:
                return web.Response(status=416, headers={"Content-Range": f"bytes */{entry.size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
        length = max(end - start + 1, 0)
        if request.method == "HEAD":
            headers["Content-Length"] = str(length)
            return web.Response(status=status, headers=headers)
        with self.store.object_path(entry.sha256).open("rb") as handle:
            handle.seek(start)
            data = handle.read(length)
        return web.Response(status=status, body=data, headers=headers)


def main() -> None:
    """Serve until interrupted: ``python -m tests.doubles.hub_server --port 8765 --root /tmp/hub``."""
    import argparse
    import signal
    import sys
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--root", type=Path, default=None, help="Storage folder (default: a new temp folder).")
    parser.add_argument("--token", default=None, help="Token writes must carry (default: any bearer token).")
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="hub-test-server-"))
    server = HubServer(root, host=args.host, port=args.port, token=args.token).start()
    sys.stdout.write(f"{server.url}\n")
    sys.stdout.flush()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()
