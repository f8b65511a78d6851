"""The run folder: where it is, whether it may be used (a new folder, or a resume with the same settings), and
the manifest that records what made its results."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from harness import __version__
from harness.episode.judging import Judge
from harness.files import UnsafeFile
from harness.library import Library
from harness.llm import LLMClient
from harness.records.versions import library_checks_hash
from harness.results.metrics import MANIFEST_FILE, RESULTS_FILE, load_manifest, run_file_exists
from harness.rules.profiles import DEFAULT_RULES
from harness.schema import DatasetRef, RunManifest

from .config import IN_PROCESS_PROVIDERS, RESULT_SETTINGS, RunConfig, RunRefused, role_models, sent_sampling


def default_run_dir(config: RunConfig) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    model = "".join(c if c.isalnum() or c in "-_." else "-" for c in config.model)
    return Path("runs") / f"{stamp}-{model}"


def check_folder_usable(run_dir: Path, resume: bool) -> None:
    """A new run needs a folder without a run; a resume needs one with a manifest (or nothing at all)."""
    manifest_path = run_dir / MANIFEST_FILE
    results_path = run_dir / RESULTS_FILE
    if manifest_path.exists() and not resume:
        raise RunRefused(f"{run_dir} already holds a run; pass --resume to continue it, or choose another --out")
    if not manifest_path.exists() and results_path.exists() and results_path.stat().st_size:
        raise RunRefused(f"{run_dir} holds results but no manifest; choose another --out")


def git_revision() -> str | None:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def build_manifest(
    config: RunConfig,
    run_id: str,
    library: Library,
    client: LLMClient,
    planned: int,
    invalid: dict[str, str] | None = None,
) -> RunManifest:
    agent, user = role_models(config)
    resolution: dict[str, Any] = {}
    for model in {
        config.model,
        config.user_model or config.model,
        *([config.judge_model] if config.judge_model else []),
    }:
        try:
            resolution[model] = client.resolve(model).model_dump(mode="json")
        except Exception as exc:
            resolution[model] = {"error": str(exc)}
    return RunManifest(
        run_id=run_id,
        package_version=__version__,
        git_revision=git_revision(),
        dataset=DatasetRef(
            source=library.source.source, revision=library.source.revision, fingerprint=library.source.fingerprint
        ),
        config={
            **config.model_dump(mode="json"),
            "mcp": config.public_mcp,
            "environment_domains": {env_id: env.domain for env_id, env in library.environments.items() if env.domain},
            "invalid_scenarios": dict(sorted((invalid or {}).items())),
            # The judge of judged checks, pinned with its parameters (its resolution is in model_resolution).
            "judge": Judge.of(client, config.judge_model, config.seed).pinned() if config.judge_model else None,
            # What each role's requests carry (a parameter the rules leave unset is not sent).
            "sampling": {"agent": sent_sampling(agent), "user": sent_sampling(user)},
        },
        model_resolution=resolution,
        episodes_planned=planned,
        checks_version=library_checks_hash(library.scenarios),
    )


def resumed_manifest(run_dir: Path, manifest: RunManifest) -> RunManifest:
    """``manifest`` as it continues the folder's run (its id and creation time), when the folder holds one whose
    settings match; ``manifest`` itself for a new folder."""
    manifest_path = run_dir / MANIFEST_FILE
    if not run_file_exists(run_dir, MANIFEST_FILE):
        return manifest
    try:
        previous = load_manifest(run_dir)
    except UnsafeFile:
        raise
    except ValueError as exc:
        raise RunRefused(
            f"{manifest_path} is not a run manifest ({exc.__class__.__name__}); choose another --out"
        ) from None
    check_resumable(previous, manifest)
    return manifest.model_copy(update={"run_id": previous.run_id, "created_at": previous.created_at})


def resolution_line(entry: Any) -> str:
    """A model's resolution as recorded in a manifest, in one line: the provider model and where it runs."""
    if not isinstance(entry, dict):
        return repr(entry)
    if "error" in entry:
        return f"unresolvable ({entry['error']})"
    provider_model = str(entry.get("provider_model"))
    if entry.get("api_base"):
        where = f" at {entry['api_base']}"
    elif provider_model.split("/", 1)[0] in IN_PROCESS_PROVIDERS:
        where = " (in this process)"
    else:
        where = ""
    return f"{provider_model}{where}"


def check_resumable(previous: RunManifest, current: RunManifest) -> None:
    """Refuse to mix results of different settings, models or data in one folder, naming what differs."""
    differences = []
    # Folders made before episode rules existed ran under the default rules; before per-role sampling, the user
    # was sent the agent's temperature.
    defaults = {"rules": DEFAULT_RULES, "user_temperature": previous.config.get("temperature")}
    for key in RESULT_SETTINGS:
        before = previous.config.get(key, defaults.get(key))
        after = current.config.get(key, defaults.get(key))
        if before != after:
            differences.append(f"{key}: {before!r} in the folder, {after!r} now")
    for model, before in previous.model_resolution.items():
        after = current.model_resolution.get(model)
        if after is not None and resolution_line(before) != resolution_line(after):
            differences.append(
                f"model {model!r} resolves to {resolution_line(after)} now, {resolution_line(before)} in the folder"
            )
    if previous.dataset.fingerprint != current.dataset.fingerprint:
        differences.append(
            f"environment set: {previous.dataset.source}@{previous.dataset.fingerprint} in the folder, "
            f"{current.dataset.source}@{current.dataset.fingerprint} now"
        )
    if differences:
        raise RunRefused(
            "cannot resume: the run folder was made with other settings — "
            + "; ".join(differences)
            + " (run with the folder's settings, or choose another --out)"
        )


def write_manifest(run_dir: Path, manifest: RunManifest) -> None:
    """Write the manifest whole or not at all (a kill mid-write leaves the previous one)."""
    path = run_dir / MANIFEST_FILE
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(orjson.dumps(manifest.model_dump(mode="json"), option=orjson.OPT_INDENT_2))
    temporary.replace(path)
