"""Uploading a built Hub-format folder with ``huggingface_hub``.

The token is never handled here: ``HfApi`` finds it itself (``HF_TOKEN`` or the saved login). Re-publishing
identical files makes no commit, because the card merges to the same text and the client skips files whose
remote hash matches. Publishing one config into a repository keeps the others: the existing card is merged
(``merge_card``) and only this publish's ``data/<config>/`` folders are replaced.

A failed upload raises ``PublishError`` naming the step that failed, and says to re-run only when a retry can
help (a server error, a rate limit, a dropped connection): blobs already uploaded are not sent again.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.hub.build import DEFAULT_LICENSE, BuiltDataset, build_from_source
from harness.hub.card import merge_card

logger = logging.getLogger(__name__)

DEFAULT_BRANCH = "main"
RETRYABLE_STATUS = frozenset({408, 409, 412, 425, 429})
"""Client-side statuses worth retrying; every 5xx is retried too."""


class PublishError(RuntimeError):
    """An upload that did not complete. ``folder`` holds the built dataset when it was kept, else None."""

    def __init__(self, message: str, folder: Path | None, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.folder = folder
        self.retryable = retryable


class RepoIdError(ValueError):
    """A repository id that the Hub would refuse."""


@dataclass
class PublishResult:
    repo_id: str
    revision: str
    commit_sha: str
    committed: bool
    """False when the Hub already had identical files (no commit was made)."""
    url: str
    made_private: bool = False
    """True when ``private=True`` turned an existing public repository private."""


def validate_repo_id(repo_id: str) -> str:
    """``repo_id`` if the Hub accepts it as ``ORG/NAME``, by huggingface_hub's own rules; else ``RepoIdError``."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id as hub_validate

    if repo_id.count("/") != 1:
        raise RepoIdError(f"{repo_id!r} is not ORG/NAME")
    try:
        hub_validate(repo_id)
    except HFValidationError as error:
        first = str(error).strip().splitlines()[0]
        raise RepoIdError(f"{repo_id!r} is not a valid Hub repository id: {first}") from error
    return repo_id


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


def _status(error: BaseException) -> int | None:
    current: BaseException | None = error
    while current is not None:
        response = getattr(current, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int):
            return status
        current = current.__cause__ or current.__context__
    return None


def is_retryable(error: BaseException) -> bool:
    """Would the same request succeed later? Server errors, rate limits, stale parents, dropped connections."""
    import httpx

    status = _status(error)
    if status is not None:
        return status in RETRYABLE_STATUS or status >= 500
    current: BaseException | None = error
    while current is not None:
        if isinstance(current, httpx.TransportError | ConnectionError | TimeoutError):
            return True
        current = current.__cause__ or current.__context__
    return False


def _advice(error: BaseException, retryable: bool, folder: Path | None) -> str:
    if retryable:
        kept = f" The built dataset is kept in {folder}." if folder is not None else ""
        return f"Re-run the same command to resume (files already on the Hub are not uploaded again).{kept}"
    status = _status(error)
    if status == 401:
        return "The Hub refused the credentials: set HF_TOKEN or run `hf auth login` with a token that can write."
    if status == 403:
        return "The token may not write to this repository (or organization): use a token with write access."
    if status == 404:
        return "The repository or branch was not found for this token."
    return "Retrying will not help until the cause above is fixed."


def _redact(text: str) -> str:
    """Remove the token from an error text, in case a server ever echoes it back."""
    from huggingface_hub import get_token

    token = get_token()
    return text.replace(token, "***") if token else text


def _existing_card(repo_id: str, branch: str) -> str | None:
    """The card on BRANCH, or None when the repository has none."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, RevisionNotFoundError

    try:
        path = hf_hub_download(repo_id, "README.md", repo_type="dataset", revision=branch)
    except (EntryNotFoundError, RevisionNotFoundError):
        return None
    return Path(path).read_text(encoding="utf-8")


def upload_built(
    built: BuiltDataset,
    *,
    private: bool = False,
    revision: str | None = None,
    message: str | None = None,
    keep_build: bool = True,
) -> PublishResult:
    """Create the dataset repo (and branch) if needed, merge the card into the one there, and upload the folder
    in one commit. ``private=True`` on an existing public repository makes it private (``made_private``).
    After a failure the folder is removed unless ``keep_build`` (kept by default: the caller owns it)."""
    from huggingface_hub import HfApi

    api = HfApi()
    repo_id = validate_repo_id(built.repo_id)
    branch = revision or DEFAULT_BRANCH
    commit_message = message or f"Publish {built.kind} with harness"
    step = f"create the dataset repository {repo_id}"
    made_private = False
    try:
        repo_url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        if private:
            step = f"read the visibility of {repo_id}"
            if not api.dataset_info(repo_id).private:
                step = f"make the existing public repository {repo_id} private (--private)"
                api.update_repo_settings(repo_id, repo_type="dataset", private=True)
                made_private = True
                logger.warning("%s was public; it is now private as --private asked", repo_id)
        if branch != DEFAULT_BRANCH:
            step = f"create branch {branch!r} of {repo_id}"
            api.create_branch(repo_id, repo_type="dataset", branch=branch, exist_ok=True)
        step = f"read the head of {repo_id}@{branch}"
        before = api.dataset_info(repo_id, revision=branch).sha
        step = f"read the card of {repo_id}@{branch}"
        card = merge_card(_existing_card(repo_id, branch), built.card)
        (built.folder / "README.md").write_text(card, encoding="utf-8")
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
        retryable = is_retryable(error)
        folder: Path | None = built.folder
        if not keep_build:
            shutil.rmtree(built.folder, ignore_errors=True)
            folder = None
        raise PublishError(
            f"Publishing {built.kind} to {repo_id}@{branch} failed: could not {step}: "
            f"{_redact(_describe(error))}\n{_advice(error, retryable, folder)}",
            folder,
            retryable=retryable,
        ) from error
    commit_sha = str(info.oid)
    committed = commit_sha != before
    if committed:
        logger.info("published %s to %s@%s: commit %s", built.kind, repo_id, branch, commit_sha)
    else:
        logger.info("%s@%s already has these files (commit %s); nothing to publish", repo_id, branch, commit_sha)
    return PublishResult(repo_id, branch, commit_sha, committed, str(repo_url), made_private)


def publish(
    kind: str,
    source: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    message: str | None = None,
    license: str | None = None,
    keep_build: bool = False,
) -> PublishResult:
    """Build SOURCE as KIND in a fresh folder and upload it. The repository id is checked before anything is
    built. The folder is removed afterwards, also after a failure unless ``keep_build``. Without ``license``,
    a library keeps its source card's license, else apache-2.0."""
    validate_repo_id(repo_id)
    folder = Path(tempfile.mkdtemp(prefix="harness-publish-"))
    try:
        built = build_from_source(kind, source, folder, repo_id, license=license)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    result = upload_built(built, private=private, revision=revision, message=message, keep_build=keep_build)
    shutil.rmtree(folder, ignore_errors=True)
    return result


__all__ = [
    "DEFAULT_LICENSE",
    "PublishError",
    "PublishResult",
    "RepoIdError",
    "is_retryable",
    "publish",
    "upload_built",
    "validate_repo_id",
]
