"""What ``harness run`` takes (:class:`RunConfig`), the settings derived from it, and the run's refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import BadInput, Unavailable
from harness.llm.client import DEFAULT_TIMEOUT_S
from harness.llm.local_provider import LOCAL_PROVIDER
from harness.llm.python_models import PYTHON_PROVIDER
from harness.rules import RulesName
from harness.schema import AgentSettings, ModelSettings

# Settings that change what an episode does: resuming with any of them different would mix two experiments.
RESULT_SETTINGS = (
    "model",
    "agent_kind",
    "mode",
    "user_model",
    "temperature",
    "max_tokens",
    "seed",
    "max_steps",
    "system_prompt_version",
    "mcp",
    "rules",
)

# Agent kinds that call no model: their runs need no model endpoint (the reference-actions replayer and the
# do-nothing baseline).
MODEL_FREE_AGENT_KINDS = frozenset({"oracle", "do_nothing"})
IN_PROCESS_PROVIDERS = frozenset({LOCAL_PROVIDER, PYTHON_PROVIDER})


class RunConfig(BaseModel):
    """Everything ``harness run`` takes; each CLI flag has the keyword of the same name."""

    model_config = ConfigDict(extra="forbid")

    model: str = "local"
    agent_kind: str = Field(default="function_calling", description="function_calling, prompted or oracle.")
    envs: str | None = Field(default=None, description="Folder or Hub id; default the bundled seed library.")
    mode: Literal["nonconv", "conv", "both"] = "nonconv"
    user_model: str | None = Field(default=None, description="Simulated user's model; default the agent's.")
    trials: int = Field(default=1, ge=1)
    env: list[str] = Field(default_factory=list, description="Only these environment ids.")
    scenario: list[str] = Field(default_factory=list, description="Only these scenario ids.")
    limit: int | None = Field(default=None, ge=1, description="At most this many scenarios (after filters).")
    concurrency: int = Field(default=32, ge=1, description="Episodes in flight.")
    rpm: int | None = Field(default=None, ge=1, description="Requests per minute per endpoint.")
    tpm: int | None = Field(default=None, ge=1, description="Tokens per minute per endpoint.")
    temperature: float | None = 0.0
    max_tokens: int | None = None
    seed: int = 0
    max_steps: int | None = None
    system_prompt_version: str = "1"
    out: Path | None = Field(default=None, description="Run folder; default runs/<time>-<model>.")
    resume: bool = False
    retry_errors: bool = False
    cost_limit: float | None = Field(
        default=None,
        ge=0,
        description="Start no episode once the spend recorded for the run folder reaches this many USD (all roles; "
        "episodes in flight finish). Every model called needs a price; --resume with a higher limit continues.",
    )
    retry_unretryable: bool = Field(
        default=False,
        description="With --retry-errors, also re-run infrastructure errors recorded as not retryable (a request the "
        "endpoint rejected, an in-process model that raised).",
    )
    workers: int | None = Field(default=None, description="Sandbox zygotes that fork the sandbox processes; default 1.")
    allow_weak_sandbox: bool = Field(
        default=False, description="Run Hub code even when a confinement layer is missing on this machine."
    )
    cache_dir: Path | None = Field(default=None, description="Opt-in on-disk model response cache.")
    mcp: str | None = Field(
        default=None, description="Evaluate through an MCP server instead: a URL, or a command that serves on stdio."
    )
    timeout: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, description="Seconds one model request may take.")
    skip_bad_records: bool = Field(
        default=False, description="Run without library records that do not load (listed in the manifest)."
    )
    rules: RulesName | None = Field(
        default=None,
        description="Episode rules (harness or envscaler); default the library's suggestion (EnvScaler imports "
        "suggest envscaler), else harness. The manifest records the rules used.",
    )
    include_invalid: bool = Field(
        default=False, description="Also run scenarios that the cheap part of `harness validate` finds invalid."
    )
    ray: str | None = Field(
        default=None,
        description="Run episodes on a Ray cluster: an address (host:port or ray://...), 'auto', or 'local'.",
    )


class RunRefused(BadInput):
    """The run cannot start as asked: bad input (one problem per line), or a folder made with other settings."""


class ModelUnavailable(Unavailable):
    """A model endpoint does not answer (probed once before the first episode): nothing could be measured."""


def agent_settings(config: RunConfig) -> AgentSettings:
    return AgentSettings(
        kind=config.agent_kind,
        role="agent",
        model=ModelSettings(
            model=config.model, temperature=config.temperature, max_tokens=config.max_tokens, seed=config.seed
        ),
        system_prompt_version=config.system_prompt_version,
    )


def user_settings(config: RunConfig) -> AgentSettings:
    return AgentSettings(
        kind="simulated_user",
        role="user",
        model=ModelSettings(model=config.user_model or config.model, temperature=config.temperature, seed=config.seed),
        system_prompt_version=config.system_prompt_version,
    )


def models_in_use(config: RunConfig) -> list[str]:
    """The model strings this run will call: the agent's (unless it needs none) and the simulated user's."""
    models = []
    if config.agent_kind not in MODEL_FREE_AGENT_KINDS:
        models.append(config.model)
    if config.mode in ("conv", "both"):
        models.append(config.user_model or config.model)
    return list(dict.fromkeys(models))
