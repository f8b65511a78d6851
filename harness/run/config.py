"""What ``harness run`` takes (:class:`RunConfig`), the settings derived from it, and the run's refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.errors import BadInput, Unavailable
from harness.llm.client import DEFAULT_TIMEOUT_S
from harness.llm.local_provider import LOCAL_PROVIDER
from harness.llm.python_models import PYTHON_PROVIDER
from harness.mcp.credential import public_target
from harness.registry import agent_kinds, profile_names, profiles, rules_profile
from harness.registry.options import ALLOW_WEAK_SANDBOX_HELP
from harness.rules.profiles import DEFAULT_RULES, RoleSampling, RulesName
from harness.schema import AgentSettings, JSONValue, ModelSettings

Number = TypeVar("Number", float, int)

# Settings that change what an episode does: resuming with any of them different would mix two experiments.
RESULT_SETTINGS = (
    "model",
    "agent_kind",
    "mode",
    "user_model",
    "judge_model",
    "temperature",
    "user_temperature",
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
ORACLE_USER_MODEL = "oracle-user"
"""``--user-model oracle-user``: no model; the user is the oracle's (``agents.oracle_user``), which plays the user's
reference actions (dual control) and hands the turn over to the agent between its runs."""
IN_PROCESS_PROVIDERS = frozenset({LOCAL_PROVIDER, PYTHON_PROVIDER})


def _choices(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def rules_help() -> str:
    """``--rules``: the profiles of the installed benchmarks."""
    return (
        f"Episode rules: {_choices(list(profile_names()))} (default: the library's recommendation, else harness; a "
        "benchmark's import recommends its own, and rules that run only conversations run them without --mode). The "
        "manifest records the rules used."
    )


def agent_kinds_help() -> str:
    """``--agent``: the project's agents, and those the installed benchmarks bring."""
    own = "function_calling, prompted, oracle (reference actions), do_nothing"
    brought = [f"{kind.name} ({kind.help})" for kind in agent_kinds()]
    return f"{own}, or {', '.join(brought)}." if brought else f"{own}."


def max_steps_help() -> str:
    """``--max-steps``: the default of each profile that has its own."""
    own = [
        f"{profile.name} {profile.default_max_steps} {'messages' if profile.step_unit == 'message' else 'agent turns'}"
        for profile in profiles().values()
        if profile.default_max_steps is not None
    ]
    rules = f"; the rules' own defaults: {', '.join(own)}" if own else ""
    return (
        "Step limit per episode: agent turns (default 30 nonconv, 40 conv), or every message under rules that count "
        f"messages{rules}."
    )


class RunConfig(BaseModel):
    """Everything ``harness run`` takes. Each user-facing field is one flag of ``harness run`` (its name with
    dashes, or the ``flag`` of its ``json_schema_extra``) and its description is that flag's help text; a field
    marked ``user_facing: False`` has no flag."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        default="local", description="Model alias (see harness/data/models.toml) or litellm model string."
    )
    agent_kind: str = Field(
        default="function_calling",
        description=agent_kinds_help(),
        json_schema_extra={"flag": "agent"},
    )
    envs: str | None = Field(
        default=None, description="Folder or Hub dataset id ORG/NAME or ORG/NAME@REV; default the seed library."
    )
    mode: Literal["nonconv", "conv", "both"] | None = Field(
        default=None,
        description="nonconv, conv or both (default: the library's recommendation, a conversation for rules that run "
        "only conversations, else nonconv).",
    )
    user_model: str | None = Field(default=None, description="Simulated user's model (default: --model).")
    judge_model: str | None = Field(
        default=None,
        description="The LLM judge of scenarios' judged checks (a model alias; needed when they have any).",
    )
    trials: int = Field(default=1, ge=1, description="Trials per scenario and mode (for pass^k).")
    env: list[str] = Field(default_factory=list, description="Only this environment id; repeatable.")
    scenario: list[str] = Field(default_factory=list, description="Only this scenario id; repeatable.")
    limit: int | None = Field(default=None, ge=1, description="At most this many scenarios (after the filters).")
    concurrency: int = Field(
        default=32, ge=1, description="Episodes in flight (at most the model alias's max_episodes)."
    )
    max_requests: int | None = Field(
        default=None,
        ge=1,
        description="Model requests in flight per endpoint, in each process that calls it (default: no cap but the "
        "episodes in flight, each of which waits for one answer at a time).",
    )
    rpm: int | None = Field(default=None, ge=1, description="Requests per minute per endpoint.")
    tpm: int | None = Field(default=None, ge=1, description="Tokens per minute per endpoint.")
    temperature: float | None = Field(
        default=None,
        description="The agent's sampling temperature (default: what the rules' benchmark sends its agent, else 0.0).",
    )
    user_temperature: float | None = Field(
        default=None,
        description="The simulated user's sampling temperature (default: what the rules' benchmark sends its user, "
        "else --temperature).",
    )
    max_tokens: int | None = Field(
        default=None,
        description="The agent's completion token cap per model call (default: the rules' benchmark's, else none).",
    )
    seed: int = Field(
        default=0,
        description="Base seed of the sandboxes, and the seed sent to the models (unless the rules' benchmark sends "
        "none).",
    )
    max_steps: int | None = Field(
        default=None,
        description=max_steps_help(),
    )
    system_prompt_version: str = Field(
        default="1",
        description="Version of the agents' system prompts (set by the code, recorded in the manifest).",
        json_schema_extra={"user_facing": False},
    )
    out: Path | None = Field(default=None, description="Run folder (default runs/<time>-<model>).")
    resume: bool = Field(default=False, description="Continue the run in --out; only missing episodes run.")
    retry_errors: bool = Field(
        default=False, description="With --resume, also re-run infrastructure errors a retry can help."
    )
    retry_unretryable: bool = Field(
        default=False,
        description="With --retry-errors, also re-run infrastructure errors recorded as not retryable (a request the "
        "endpoint rejected, an in-process model that raised).",
    )
    cost_limit: float | None = Field(
        default=None,
        ge=0,
        description="Start no episode once the spend recorded for the run folder reaches this many USD (all roles; "
        "episodes in flight finish). Every model called needs a price; --resume with a higher limit continues.",
    )
    workers: int | None = Field(default=None, description="Sandbox zygotes (fork servers; default 1).")
    allow_weak_sandbox: bool = Field(default=False, description=ALLOW_WEAK_SANDBOX_HELP)
    cache_dir: Path | None = Field(default=None, description="Cache model responses in this folder.")
    mcp: str | None = Field(
        default=None,
        description="Use the environment served over MCP at this URL (the one harness serve printed, credential "
        "included), or by this stdio command.",
    )
    timeout: float = Field(
        default=DEFAULT_TIMEOUT_S, gt=0, description="Seconds one model request may take before it is retried."
    )
    skip_bad_records: bool = Field(
        default=False, description="Run without library records that do not load (they are listed in the manifest)."
    )
    rules: RulesName | None = Field(default=None, description=rules_help())
    include_invalid: bool = Field(
        default=False,
        description="Also run scenarios that `harness validate` finds invalid (recorded in the manifest).",
    )
    ray: str | None = Field(
        default=None,
        description="Run episodes on a Ray cluster: HOST:PORT or ray://HOST:PORT to join one, 'auto' for the "
        "cluster this machine belongs to; alone, start a local one.",
    )

    @field_validator("mcp")
    @classmethod
    def _hide_mcp_credential(cls, value: str | None) -> str | None:
        if value is not None:
            public_target(value)  # registers the URL's credential as a secret: no log or result holds it
        return value

    @property
    def public_mcp(self) -> str | None:
        """``mcp`` as it is recorded (manifest, episode ids) and shown: a URL's credential replaced, so that a new
        token for the same server changes nothing, and no run folder holds it."""
        return public_target(self.mcp) if self.mcp is not None else None


class RunRefused(BadInput):
    """The run cannot start as asked: bad input (one problem per line), or a folder made with other settings."""


class ModelUnavailable(Unavailable):
    """A model endpoint does not answer (probed once before the first episode): nothing could be measured."""


def _given(flag: Number | None, default: Number | None) -> Number | None:
    return flag if flag is not None else default


def _tool_choice(role: RoleSampling) -> dict[str, JSONValue]:
    """The role's tool_choice, which the client sends only with tools."""
    return {"tool_choice": role.tool_choice} if role.tool_choice is not None else {}


def role_models(config: RunConfig) -> tuple[ModelSettings, ModelSettings]:
    """What the agent's and the user's model requests carry: a flag given wins; a flag not given takes what the
    rules' benchmark sends that role (its :class:`~harness.rules.profiles.Sampling`), a parameter it leaves unset is
    not sent; rules that declare none keep the project's (0.0, or --temperature for both roles; --seed sent)."""
    sampling = rules_profile(config.rules or DEFAULT_RULES).sampling
    agent_model, user_model = config.model, config.user_model or config.model
    if sampling is None:
        agent_temperature = _given(config.temperature, 0.0)
        return (
            ModelSettings(
                model=agent_model, temperature=agent_temperature, max_tokens=config.max_tokens, seed=config.seed
            ),
            ModelSettings(
                model=user_model, temperature=_given(config.user_temperature, agent_temperature), seed=config.seed
            ),
        )
    agent, user = sampling.agent, sampling.user
    return (
        ModelSettings(
            model=agent_model,
            temperature=_given(config.temperature, agent.temperature),
            top_p=agent.top_p,
            max_tokens=_given(config.max_tokens, agent.max_tokens),
            seed=config.seed if agent.seed else None,
            extra=_tool_choice(agent),
        ),
        ModelSettings(
            model=user_model,
            temperature=_given(config.user_temperature, user.temperature),
            top_p=user.top_p,
            max_tokens=user.max_tokens,
            seed=config.seed if user.seed else None,
            extra=_tool_choice(user),
        ),
    )


def sent_sampling(settings: ModelSettings) -> dict[str, JSONValue]:
    """The sampling parameters a role's requests carry (those left unset are not sent; tool_choice only with
    tools)."""
    values = {name: getattr(settings, name) for name in ("temperature", "top_p", "max_tokens", "seed")}
    return {name: value for name, value in {**values, **settings.extra}.items() if value is not None}


def with_sampling(config: RunConfig) -> RunConfig:
    """``config`` with the temperatures its roles are sent written in (None: not sent), as the manifest records
    them and a resume compares them."""
    agent, user = role_models(config)
    return config.model_copy(update={"temperature": agent.temperature, "user_temperature": user.temperature})


def agent_settings(config: RunConfig) -> AgentSettings:
    return AgentSettings(
        kind=config.agent_kind,
        role="agent",
        model=role_models(config)[0],
        system_prompt_version=config.system_prompt_version,
    )


def user_settings(config: RunConfig) -> AgentSettings:
    return AgentSettings(
        kind="simulated_user",
        role="user",
        model=role_models(config)[1],
        system_prompt_version=config.system_prompt_version,
    )


def models_in_use(config: RunConfig) -> list[str]:
    """The model strings this run will call: the agent's (unless it needs none) and the simulated user's."""
    models = []
    if config.agent_kind not in MODEL_FREE_AGENT_KINDS:
        models.append(config.model)
    if config.mode in ("conv", "both") and config.user_model != ORACLE_USER_MODEL:
        models.append(config.user_model or config.model)
    return list(dict.fromkeys(models))
