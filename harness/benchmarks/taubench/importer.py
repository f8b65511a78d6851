"""Import one τ-bench domain and split into an environment and one scenario per task.

The environment embeds the domain's tools (:mod:`harness.benchmarks.taubench.code`); its tool schemas are what
upstream's ``get_info()`` returns, obtained by running it in the jail, in ``ALL_TOOLS`` order. Each scenario's
initial state is the domain's data (``load_data``'s dict), its task the user's instruction, its reference actions
the task's gold actions (kept when they answer with an error upstream too), its reference reply the required
outputs. Its checks reproduce upstream's ``Env.calculate_reward`` (``tau_bench/envs/base.py``): the final data's
hash equals the hash the gold reaches (computed by :func:`replay_gold` in the jail before anything is written),
and each required output is in some reply of the agent to the user.

The import is two steps: :func:`read_taubench` reads everything it needs of the checkout (through its
:class:`~harness.files.SourceTree`: a symlinked wiki, a data file named outside the domain's data folder or a
``.git`` pointing outside are refused before any code runs), then :func:`import_taubench` runs the tools in the jail.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from harness.benchmarks.taubench.code import (
    DISPATCHER,
    ENVIRONMENT_CLASS,
    SCHEMA_PROBE_CLASS,
    environment_code,
    schema_probe_code,
    tools_source,
)
from harness.benchmarks.taubench.rules import TAUBENCH_RULES
from harness.benchmarks.taubench.source import (
    SOURCE_LICENSE_NOTE,
    DomainLayout,
    TauBenchSource,
    TauBenchSourceError,
)
from harness.benchmarks.taubench.user_prompt import (
    DETAILS_KEY,
    USER_MODULE,
    UserPromptShapeError,
    UserPromptTemplate,
    read_user_prompt,
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

SOURCE = "taubench"
ERROR_PREFIXES = ("Error", "Unknown action")

# The check compares the final data with the gold's through a hash of its sorted JSON (one C-speed pass over
# megabytes of data in the jail): for JSON data, two values have equal sorted JSON exactly when upstream's
# ``str(to_hashable(...))`` of them are equal, so the verdict is upstream's. :func:`data_hash` is upstream's own
# hash, recorded as the gold's ``gt_data_hash``.
_CHECK_SOURCE = """import hashlib
import json


def check(initial, final):
    text = json.dumps(final.get('data'), sort_keys=True)
    return hashlib.sha256(text.encode('utf-8')).hexdigest() == EXPECTED
"""


class TauBenchImportError(ValueError):
    """The import cannot be done as asked."""


@dataclass
class TauBenchRelease:
    """Everything an import reads of one domain's split, read before any of the domain's code runs."""

    layout: DomainLayout
    split: str
    commit: str
    license: str
    tasks: list[dict[str, Any]]
    data: dict[str, Any]
    """``load_data``'s dict: every data file, by its key."""
    wiki: str
    environment_code: str
    schema_probe_code: str
    user_prompt: UserPromptTemplate
    """Upstream's user-simulator prompt (``tau_bench/envs/user.py``), read from its syntax tree."""


@dataclass
class TauBenchImport:
    environment: Environment
    scenarios: list[Scenario] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Tasks whose gold cannot be replayed in the jail (one line each); nothing is written then."""
    commit: str = "unknown"


def _hashable(item: Any) -> Any:
    if isinstance(item, dict):
        return tuple((key, _hashable(value)) for key, value in sorted(item.items()))
    if isinstance(item, list):
        return tuple(_hashable(element) for element in item)
    if isinstance(item, set):
        return tuple(sorted(_hashable(element) for element in item))
    return item


def data_hash(data: Any) -> str:
    """Upstream's ``consistent_hash(to_hashable(data))`` (tau_bench/envs/base.py): sha256 of the ``str()`` of the
    data as sorted nested tuples."""
    return hashlib.sha256(str(_hashable(data)).encode("utf-8")).hexdigest()


def json_hash(data: Any) -> str:
    """What the data check compares: sha256 of the data's JSON with sorted keys."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()


def data_check(data: Any) -> Check:
    """The final data equals ``data`` (the gold's), as upstream's data-hash comparison decides."""
    return Check(
        id="taubench-data",
        description="The final data equals the data the task's gold actions reach (τ-bench's data hash).",
        source=_CHECK_SOURCE.replace("EXPECTED", repr(json_hash(data))),
    )


def output_check(index: int, output: str) -> Check:
    """Some reply of the agent to the user (an assistant message without tool calls) holds ``output``, compared
    in lower case with the reply's commas removed, as upstream's ``calculate_reward`` does."""
    source = (
        "def check(initial, final, transcript):\n"
        f"    output = {output.lower()!r}\n"
        "    for message in transcript:\n"
        "        content = message.get('content')\n"
        "        if message.get('role') != 'assistant' or message.get('tool_calls') or not isinstance(content, str):\n"
        "            continue\n"
        "        if output in content.lower().replace(',', ''):\n"
        "            return True\n"
        "    return False\n"
    )
    return Check(id=f"taubench-output-{index}", description=f"The agent told the user {output!r}.", source=source)


def _environment(release: TauBenchRelease, tools: list[dict[str, Any]]) -> Environment:
    layout = release.layout
    return Environment(
        id=f"taubench-{layout.domain}",
        name=f"τ-bench {layout.domain}",
        domain=layout.domain,
        summary=f"τ-bench's {layout.domain} domain: its tools and data, from sierra-research/tau-bench.",
        introduction=release.wiki,
        tools=[ToolSpec(function=FunctionSpec(**tool["function"])) for tool in tools],
        class_name=ENVIRONMENT_CLASS,
        code=release.environment_code,
        call_dispatcher=DISPATCHER,
        provenance=Provenance(
            source=SOURCE,
            upstream_id=layout.domain,
            details={
                "taubench_commit": release.commit,
                "source_license": release.license,
                "license_note": SOURCE_LICENSE_NOTE,
                "terminate_tools": list(layout.terminate_tools),
            },
        ),
    )


async def probe_tools(pool: SandboxPool, release: TauBenchRelease) -> list[dict[str, Any]]:
    """Each tool's ``get_info()``, run in the jail, in ``ALL_TOOLS`` order."""
    domain = release.layout.domain
    probe = Environment(
        id=f"taubench-{domain}-schemas",
        name="schemas",
        class_name=SCHEMA_PROBE_CLASS,
        code=release.schema_probe_code,
        call_dispatcher=DISPATCHER,
    )
    session = await open_tool_session(pool, probe, {}, record_diffs=False)
    try:
        assert isinstance(session, DispatchSession)
        observation = await session.call_raw(ToolCall(id="schemas", name="schemas", arguments={}))
    finally:
        await session.close()
    if not isinstance(observation.content, str):
        raise TauBenchSourceError(f"the {domain} tools do not give their schemas in the jail: {observation.error}")
    tools: list[dict[str, Any]] = orjson.loads(observation.content)
    return tools


async def replay_gold(
    pool: SandboxPool, environment: Environment, scenario: Scenario, terminate_tools: list[str]
) -> tuple[Any, list[str]]:
    """The data the gold reaches (None when it cannot run), replayed as upstream's ``calculate_reward`` does
    (terminate tools skipped), and the gold actions that answer with an error (upstream goes on past them)."""
    session = await open_tool_session(pool, environment, scenario.initial_state, record_diffs=False)
    errors: list[str] = []
    try:
        assert isinstance(session, DispatchSession)
        for index, action in enumerate(scenario.reference_actions):
            if action.name in terminate_tools:
                continue
            call = ToolCall(id=f"gold-{index}", name=action.name, arguments=dict(action.arguments))
            observation = await session.call_raw(call)
            if observation.error is not None:
                return None, [f"gold action {index} ({action.name}) failed in the jail: {observation.error}"]
            content = observation.content
            if isinstance(content, str) and content.startswith(ERROR_PREFIXES):
                errors.append(f"gold action {index} ({action.name}) answers: {content[:160]}")
        state = await session.state()
    finally:
        await session.close()
    return state.get("data"), errors


def _scenario(
    environment: Environment,
    release: TauBenchRelease,
    index: int,
    task: dict[str, Any],
) -> Scenario:
    layout, split = release.layout, release.split
    outputs = list(task["outputs"])
    return Scenario(
        id=f"taubench-{layout.domain}-{split}-{index}",
        environment_id=environment.id,
        initial_state={"data": release.data},
        task=task["instruction"],
        reference_actions=[ReferenceAction(name=a["name"], arguments=a["kwargs"]) for a in task["actions"]],
        reference_reply=" ".join(outputs) or None,
        tags=["taubench", layout.domain, split],
        provenance=Provenance(
            source=SOURCE,
            upstream_id=str(index),
            details={
                "domain": layout.domain,
                "split": split,
                "task_index": index,
                "user_id": task["user_id"],
                "outputs": outputs,
                "source_license": environment.provenance.details["source_license"],
                "taubench_commit": environment.provenance.details["taubench_commit"],
                DETAILS_KEY: release.user_prompt.model_dump(),
            },
        ),
    )


def read_taubench(source: TauBenchSource, domain: str, split: str) -> TauBenchRelease:
    """Read everything the import of ``domain``/``split`` needs, before any of its code runs."""
    layout = source.layout(domain)
    if split not in layout.splits:
        raise TauBenchImportError(f"no split {split!r} for {domain}; it has {', '.join(layout.splits)}")
    unknown_ending = sorted(set(layout.terminate_tools) - set(TAUBENCH_RULES.ending_tools))
    if unknown_ending:
        raise TauBenchImportError(
            f"{domain}'s terminate_tools {unknown_ending} are not among the taubench rules' ending tools "
            f"{list(TAUBENCH_RULES.ending_tools)}"
        )
    module, name = layout.splits[split]
    tools = tools_source(source, layout)
    try:
        user_prompt = read_user_prompt(source.read_python(USER_MODULE)[1], source.where(USER_MODULE))
    except UserPromptShapeError as exc:
        raise TauBenchSourceError(str(exc)) from None
    return TauBenchRelease(
        layout=layout,
        split=split,
        commit=source.commit,
        license=source.license,
        tasks=source.tasks(domain, module, name),
        data={key: source.read_json(f"{domain}/data/{file}") for key, file in layout.data_files.items()},
        wiki=source.read_text(f"{domain}/wiki.md"),
        environment_code=environment_code(tools, layout),
        schema_probe_code=schema_probe_code(tools),
        user_prompt=user_prompt,
    )


async def import_taubench(release: TauBenchRelease, pool: SandboxPool, *, concurrency: int = 2) -> TauBenchImport:
    layout = release.layout
    environment = _environment(release, await probe_tools(pool, release))
    result = TauBenchImport(environment=environment, commit=release.commit)
    result.scenarios = [_scenario(environment, release, i, task) for i, task in enumerate(release.tasks)]
    gate = asyncio.Semaphore(concurrency)

    async def verify(index: int) -> None:
        scenario = result.scenarios[index]
        async with gate:
            expected, errors = await replay_gold(pool, environment, scenario, layout.terminate_tools)
        if expected is None:
            result.problems.append(f"{scenario.id}: {errors[0]}")
            return
        details = dict(scenario.provenance.details)
        details["gold_errors"] = list(errors)
        details["gold_data_hash"] = data_hash(expected)
        outputs = [str(o) for o in scenario.provenance.details["outputs"]]
        checks = [data_check(expected), *(output_check(i, output) for i, output in enumerate(outputs))]
        result.scenarios[index] = scenario.model_copy(
            update={"checks": checks, "provenance": scenario.provenance.model_copy(update={"details": details})}
        )

    await asyncio.gather(*(verify(i) for i in range(len(result.scenarios))))
    result.problems.sort()
    return result
