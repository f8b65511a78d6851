"""A readable HTML page for one trajectory: checks, conversation with tool calls, observations and diffs."""

from __future__ import annotations

from typing import Any

from harness.results.metrics import assistant_turns, episode_cost, episode_tokens
from harness.schema import Check, CheckResult, DiffEntry, Scenario, Step, Trajectory
from leaderboards.page import esc, fmt_cost, fmt_float, fmt_tokens, html_page, to_json_text
from leaderboards.verdicts import closed_gates


def render_trajectory_html(
    trajectory: Trajectory, scenario: Scenario | None = None, back_link: str | None = None
) -> str:
    """The whole page for one trajectory. Every piece of model or environment text is escaped.

    With its ``scenario`` the page also shows the task and what each check verifies.
    """
    steps_by_call = {step.call.id: step for step in trajectory.steps}
    shown_calls: set[str] = set()
    parts = []
    if back_link is not None:
        parts.append(f'<p><a href="{esc(back_link)}">← back to the report</a></p>')
    parts.append(f"<h1>Episode {esc(trajectory.episode_id)}</h1>")
    parts.append(_overview(trajectory))
    if scenario is not None:
        parts.append("<h2>Task</h2>")
        parts.append(f"<pre>{esc(scenario.task)}</pre>")
        if trajectory.mode == "conv" and scenario.user_profile is not None:
            parts.append(f'<p class="meta">Simulated user\'s goal: {esc(scenario.user_profile.goal)}</p>')
    if scenario is not None and scenario.reference_actions:
        parts.append("<h2>Reference actions and the agent's calls</h2>")
        parts.append(_reference_table(scenario, trajectory))
    parts.append("<h2>Checks</h2>")
    if not trajectory.check_results and scenario is not None and scenario.checks:
        parts.append(_not_evaluated_table(scenario, trajectory))
    else:
        parts.append(_checks_table(trajectory.check_results, scenario.checks if scenario is not None else []))
    parts.append("<h2>Conversation</h2>")
    for block, repeats in _collapsed_blocks(trajectory.messages):
        parts.extend(_message_html(message, steps_by_call, shown_calls) for message in block)
        for repeated in repeats:  # identical calls with identical results: shown once, counted here
            for message in repeated:
                for call in message.get("tool_calls") or []:
                    if isinstance(call, dict):
                        shown_calls.add(str(call.get("id", "")))
        if repeats:
            times = "once more" if len(repeats) == 1 else f"{len(repeats)} more times"
            parts.append(
                f'<div class="meta repeated">↻ the same call{"s" if _call_count(block) > 1 else ""} with the '
                f"same result{'s' if _call_count(block) > 1 else ''} repeated {times}</div>"
            )
    if not trajectory.messages:
        parts.append('<p class="meta">No messages were recorded.</p>')
    unshown = [step for step in trajectory.steps if step.call.id not in shown_calls]
    if unshown:
        parts.append("<h2>Steps not shown in the conversation</h2>")
        parts.extend(_step_html(step) for step in unshown)
    parts.append("<h2>Final state diff</h2>")
    parts.append(_diff_table(trajectory.final_state_diff))
    if trajectory.errors:
        parts.append("<h2>Errors</h2>")
        parts.extend(f"<pre>{esc(error)}</pre>" for error in trajectory.errors)
    return html_page(f"Episode {trajectory.episode_id}", "\n".join(parts))


def _overview(trajectory: Trajectory) -> str:
    reward = trajectory.reward
    agent_model = trajectory.agent.model
    rows: list[tuple[str, str]] = [
        ("Scenario", trajectory.scenario_id),
        ("Environment", trajectory.environment_id),
        ("Mode / trial", f"{trajectory.mode} / {trajectory.trial}"),
        ("Agent", f"{agent_model.model} ({trajectory.agent.kind}, temperature {agent_model.temperature})"),
    ]
    if trajectory.user is not None:
        rows.append(("Simulated user", trajectory.user.model.model))
    termination = trajectory.termination.value
    if trajectory.termination_detail:
        termination += f": {trajectory.termination_detail}"
    rows.append(("Termination", termination))
    if reward is None:
        rows.append(("Reward", "not scored"))
    else:
        outcome = "success" if reward.success else "failure"
        rows.append(
            (
                "Reward",
                f"{outcome}; state reward {fmt_float(reward.state_reward)} "
                f"({reward.checks_passed}/{reward.checks_total} checks), "
                f"delta reward {fmt_float(reward.delta_reward)}",
            )
        )
        extras = [
            f"{name} {fmt_float(value)}"
            for name, value in (
                ("trajectory reward", reward.trajectory_reward),
                ("length penalty", reward.length_penalty),
                ("composite", reward.composite),
            )
            if value is not None
        ]
        if reward.gold_state_match is not None:
            extras.append(f"gold state match {reward.gold_state_match}")
        if extras:
            rows.append(("Other rewards", ", ".join(extras)))
    rows.append(
        (
            "Effort",
            f"assistant turns {assistant_turns(trajectory)}, tool calls {trajectory.num_tool_calls}, "
            f"tokens {fmt_tokens(episode_tokens(trajectory))}, cost {fmt_cost(episode_cost(trajectory))}, "
            f"wall time {trajectory.timings.wall_seconds:.1f} s",
        )
    )
    for role, usage in sorted(trajectory.usage.items()):
        rows.append(
            (
                f"Usage ({role})",
                f"{usage.requests} requests, {usage.prompt_tokens} prompt + {usage.completion_tokens} "
                f"completion tokens, {fmt_cost(usage.cost_usd)}",
            )
        )
    body = "".join(f"<tr><th>{esc(name)}</th><td>{esc(value)}</td></tr>" for name, value in rows)
    return f"<table>{body}</table>"


def _call_text(name: str, arguments: Any) -> str:
    return f"{name}({to_json_text(arguments) if arguments is not None else ''})"


def _reference_table(scenario: Scenario, trajectory: Trajectory) -> str:
    """The reference solution beside the calls the agent made, in order."""
    references = scenario.reference_actions
    calls = [step.call for step in trajectory.steps]
    rows = []
    for index in range(max(len(references), len(calls))):
        reference = references[index] if index < len(references) else None
        call = calls[index] if index < len(calls) else None
        if reference is not None and call is not None:
            masked = set(reference.masked_arguments)
            same = call.name == reference.name and {
                k: v for k, v in (call.arguments or {}).items() if k not in masked
            } == {k: v for k, v in reference.arguments.items() if k not in masked}
            verdict = '<span class="pass">same</span>' if same else '<span class="fail">differs</span>'
        else:
            verdict = '<span class="meta">–</span>'
        reference_text = _call_text(reference.name, reference.arguments) if reference is not None else ""
        call_text = (
            _call_text(call.name, call.arguments if call.arguments is not None else call.raw_arguments) if call else ""
        )
        rows.append(
            f"<tr><td>{index + 1}</td><td><pre>{esc(reference_text)}</pre></td>"
            f"<td><pre>{esc(call_text)}</pre></td><td>{verdict}</td></tr>"
        )
    header = "<tr><th>#</th><th>reference action</th><th>agent's call</th><th></th></tr>"
    return f'<table class="reference">{header}{"".join(rows)}</table>'


def _not_evaluated_table(scenario: Scenario, trajectory: Trajectory) -> str:
    """The scenario's checks when the episode was not scored: not evaluated, which is not failed."""
    reason = trajectory.termination.value + (
        f": {trajectory.termination_detail}" if trajectory.termination_detail else ""
    )
    rows = "".join(
        f'<tr class="not-evaluated"><td>{esc(check.id)}</td><td>{esc(check.statement)}</td>'
        f'<td><span class="meta">not evaluated</span></td></tr>'
        for check in scenario.checks
    )
    return (
        f'<p class="meta">The checks were not run: the episode ended with {esc(reason)}.</p>'
        f"<table><tr><th>check</th><th>what it verifies</th><th>result</th></tr>{rows}</table>"
    )


def _block_signature(block: list[dict[str, Any]]) -> str | None:
    """What makes two assistant tool-call turns (with their results) identical; None for other blocks."""
    head = block[0]
    if head.get("role") != "assistant" or not head.get("tool_calls") or head.get("content"):
        return None
    calls = [
        (_function_of(call).get("name"), _function_of(call).get("arguments")) for call in head.get("tool_calls") or []
    ]
    results = [_content_text(message.get("content")) for message in block[1:]]
    return to_json_text([calls, results])


def _collapsed_blocks(messages: list[dict[str, Any]]) -> list[tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]]:
    """Messages grouped as (block, repeats): an assistant turn with its tool results, then the identical turns
    that directly followed it."""
    blocks: list[list[dict[str, Any]]] = []
    for message in messages:
        if message.get("role") == "tool" and blocks and blocks[-1][0].get("role") == "assistant":
            blocks[-1].append(message)
        else:
            blocks.append([message])
    grouped: list[tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]] = []
    for block in blocks:
        signature = _block_signature(block)
        if grouped and signature is not None and _block_signature(grouped[-1][0]) == signature:
            grouped[-1][1].append(block)
        else:
            grouped.append((block, []))
    return grouped


def _call_count(block: list[dict[str, Any]]) -> int:
    return len(block[0].get("tool_calls") or [])


def _checks_table(results: list[CheckResult], checks: list[Check]) -> str:
    if not results:
        return '<p class="meta">No check results were recorded.</p>'
    ordered = sorted(results, key=lambda r: r.passed)  # failed checks first, stable otherwise
    closed = closed_gates(results, checks)
    statements = {check.id: check.statement for check in checks}
    rows = []
    for result in ordered:
        if result.passed:
            verdict, row_class = '<span class="pass">passed</span>', "passed"
        elif result.check_id in closed:
            verdict = f'<span class="meta">not evaluated ({esc(closed[result.check_id])} does not hold)</span>'
            row_class = "not-evaluated"
        else:
            verdict, row_class = '<span class="fail">FAILED</span>', "failed"
        at_reset = "–" if result.passed_at_reset is None else ("yes" if result.passed_at_reset else "no")
        detail = result.error or result.value or ""
        rows.append(
            f'<tr class="{row_class}"><td>{esc(result.check_id)}</td>'
            f"<td>{esc(statements.get(result.check_id, ''))}</td>"
            f"<td>{verdict}</td><td>{esc(at_reset)}</td><td><pre>{esc(detail)}</pre></td></tr>"
        )
    header = (
        "<tr><th>check</th><th>what it verifies</th><th>result</th><th>held at reset</th><th>returned / error</th></tr>"
    )
    return f"<table>{header}{''.join(rows)}</table>"


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part.get("text", "") if isinstance(part, dict) and part.get("type") == "text" else to_json_text(part)
            for part in content
        ]
        return "\n".join(texts)
    return to_json_text(content)


def _message_html(message: dict[str, Any], steps_by_call: dict[str, Step], shown_calls: set[str]) -> str:
    role = str(message.get("role", "unknown"))
    css_role = role if role in {"system", "user", "assistant", "tool"} else "other"
    parts = [f'<div class="message {css_role}"><div class="role"><span class="rolename">{esc(role)}</span>']
    if role == "tool":
        parts.append(f" · {esc(message.get('name', ''))} · {esc(message.get('tool_call_id', ''))}")
    parts.append("</div>")
    reasoning = message.get("reasoning_content")
    if reasoning:
        parts.append(f"<details><summary>reasoning</summary><pre>{esc(reasoning)}</pre></details>")
    text = _content_text(message.get("content"))
    if text:
        parts.append(f"<pre>{esc(text)}</pre>")
    for call in message.get("tool_calls") or []:
        function = _function_of(call)
        arguments = function.get("arguments", "")
        parts.append(
            f'<div class="call">→ <strong>{esc(function.get("name", ""))}</strong> '
            f'<span class="meta">{esc(call.get("id", "") if isinstance(call, dict) else "")}</span>'
            f"<pre>{esc(arguments if isinstance(arguments, str) else to_json_text(arguments))}</pre></div>"
        )
    if role == "tool":
        step = steps_by_call.get(str(message.get("tool_call_id", "")))
        if step is not None:
            shown_calls.add(step.call.id)
            parts.append(_observation_summary(step))
    parts.append("</div>")
    return "".join(parts)


def _observation_summary(step: Step) -> str:
    observation = step.observation
    kind_class = "pass" if observation.ok else "fail"
    parts = [f'<div class="meta">observation: <span class="badge {kind_class}">{esc(observation.kind.value)}</span>']
    if observation.error:
        parts.append(f" {esc(observation.error)}")
    parts.append("</div>")
    if step.state_diff:
        parts.append('<div class="meta">state changes:</div>')
        parts.append(_diff_table(step.state_diff))
    return "".join(parts)


def _step_html(step: Step) -> str:
    call = step.call
    arguments = call.arguments if call.arguments is not None else call.raw_arguments
    return (
        f'<div class="message tool"><div class="role">step {step.index} · turn {step.turn}</div>'
        f'<div class="call">→ <strong>{esc(call.name)}</strong>'
        f"<pre>{esc(to_json_text(arguments))}</pre></div>"
        f"<pre>{esc(to_json_text(step.observation.content))}</pre>{_observation_summary(step)}</div>"
    )


def _diff_table(entries: list[DiffEntry]) -> str:
    if not entries:
        return '<p class="meta">No changes.</p>'
    rows = "".join(
        f"<tr><td>{esc(' › '.join(str(p) for p in entry.path))}</td><td>{esc(entry.op)}</td>"
        f"<td><pre>{esc(to_json_text(entry.before))}</pre></td><td><pre>{esc(to_json_text(entry.after))}</pre></td></tr>"
        for entry in entries
    )
    return f'<table class="diff"><tr><th>path</th><th>op</th><th>before</th><th>after</th></tr>{rows}</table>'


def _function_of(call: Any) -> dict[str, Any]:
    """The ``function`` part of an OpenAI tool call, or {} when the call is malformed."""
    function = call.get("function") if isinstance(call, dict) else None
    return function if isinstance(function, dict) else {}
