"""Uploading a built Hub-format folder with ``huggingface_hub``.

The token is never handled here: ``HfApi`` finds it itself (``HF_TOKEN`` or the saved login). Re-publishing
identical files makes no commit, because the client skips files whose remote hash matches. A failed upload
raises ``PublishError`` naming the step that failed and the folder that was kept, so the same command can be
re-run to resume.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.hub.build import BuiltDataset, build_from_source

logger = logging.getLogger(__name__)

DEFAULT_BRANCH = "main"


class PublishError(RuntimeError):
    """An upload that did not complete. ``folder`` holds the built dataset, kept for a re-run."""

    def __init__(self, message: str, folder: Path) -> None:
        super().__init__(message)
        self.folder = folder


@dataclass
class PublishResult:
    repo_id: str
    revision: str
    commit_sha: str
    committed: bool
    """False when the Hub already had identical files (no commit was made)."""
    url: str


def _describe(error: BaseException) -> str:
    """The error and what caused it, one line each (the client wraps HTTP errors in other errors)."""
    lines: list[str] = []
    current: BaseException | None = error
    while current is not None and len(lines) < 4:
        text = str(current).strip()
        first_line = text.splitlines()[0].rstrip(".") if text else ""
        lines.append(f"{type(current).__name__}: {first_line}".rstrip(": "))
        current = current.__cause__ or current.__context__
    return "; caused by ".join(lines)


def _redact(text: str) -> str:
    """Remove the token from an error text, in case a server ever echoes it back."""
    from huggingface_hub import get_token

    token = get_token()
    return text.replace(token, "***") if token else text


def upload_built(
    built: BuiltDataset,
    *,
    private: bool = False,
    revision: str | None = None,
    message: str | None = None,
) -> PublishResult:
    """Create the dataset repo (and branch) if needed and upload the folder in one commit."""
    from huggingface_hub import HfApi

    api = HfApi()
    repo_id = built.repo_id
    branch = revision or DEFAULT_BRANCH
    commit_message = message or f"Publish {built.kind} with harness"
    step = f"create the dataset repository {repo_id}"
    try:
        repo_url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        if branch != DEFAULT_BRANCH:
            step = f"create branch {branch!r} of {repo_id}"
            api.create_branch(repo_id, repo_type="dataset", branch=branch, exist_ok=True)
        step = f"read the head of {repo_id}@{branch}"
        before = api.dataset_info(repo_id, revision=branch).sha
        step = f"upload {len(built.files)} files to {repo_id}@{branch}"
        info = api.upload_folder(
            repo_id=repo_id,
            repo_type="dataset",
            folder_path=built.folder,
            revision=branch,
            commit_message=commit_message,
            allow_patterns=built.files,
            # Shards of a previous publish that this one no longer has; unchanged files are never deleted.
            delete_patterns=[f"data/{config.name}/*" for config in built.configs],
        )
    except Exception as error:
        raise PublishError(
            f"Publishing {built.kind} to {repo_id}@{branch} failed: could not {step}: "
            f"{_redact(_describe(error))}\n"
            f"The built dataset is kept in {built.folder}; re-run the same command to resume "
            "(files already on the Hub are not uploaded again).",
            built.folder,
        ) from error
    commit_sha = str(info.oid)
    committed = commit_sha != before
    if committed:
        logger.info("published %s to %s@%s: commit %s", built.kind, repo_id, branch, commit_sha)
    else:
        logger.info("%s@%s already has these files (commit %s); nothing to publish", repo_id, branch, commit_sha)
    return PublishResult(repo_id, branch, commit_sha, committed, str(repo_url))


def publish(
    kind: str,
    source: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    message: str | None = None,
    license: str = "apache-2.0",
) -> PublishResult:
    """Build SOURCE as KIND in a fresh folder and upload it. The folder is removed after a successful upload
    and kept (its path is in the ``PublishError``) after a failed one."""
    folder = Path(tempfile.mkdtemp(prefix="harness-publish-"))
    try:
        built = build_from_source(kind, source, folder, repo_id, license=license)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    result = upload_built(built, private=private, revision=revision, message=message)
    shutil.rmtree(folder, ignore_errors=True)
    return result
