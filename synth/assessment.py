"""Assessment: the skeleton paper's dual-agent loop, run against the class in the sandbox.

Each round a testing agent, which sees only what an agent would (introduction, tools, current state),
proposes one call and says whether it expects success or refusal. The call runs in the sandbox. A checking
agent, which sees the rules, the method's source, the state before and after, the diff and the return value,
judges Pass, Warning or Fail. The score is (pass + warning) / judged rounds.

Coverage is the harness's job, not the tester's goodwill: every tool may be tested at most ``tests_per_tool``
times, the tester sees a per-tool summary (tested, positive, negative, passed, left) each round, and when the
rounds left are no more than the tools never tested, it must pick one of those. An environment passes only
when the score clears the threshold and every tool was exercised at least once: a tester that calls only the
read tools cannot vouch for a broken write tool.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

from harness.sandbox import SandboxPool
from harness.schema import Environment, ToolCall, Usage
from synth.answers import AnswerError, Asker
from synth.records import AssessmentReport, AssessmentRound, Judgement, ProposedCall, ToolCoverage, tool_coverage
from synth.templates import load_template

logger = logging.getLogger(__name__)

STATE_CHARS = 6000
HISTORY_SHOWN = 12
PROPOSAL_TRIES = 2
NO_METHOD = "(no such method: the runtime refused the call before it reached the class)"


class AssessmentInconclusive(RuntimeError):
    """Too few rounds could be judged (the testing or checking answers were unusable)."""


def _clip(value: Any, limit: int = STATE_CHARS) -> str:
    text = json.dumps(value, indent=1, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "\n... (truncated)"


def _history_text(rounds: list[AssessmentRound]) -> str:
    if not rounds:
        return "(none yet)"
    lines = []
    for item in rounds[-HISTORY_SHOWN:]:
        outcome = "ok" if item.observation_kind == "ok" else f"refused ({item.error})"
        lines.append(f"{item.round}. {item.tool}({json.dumps(item.arguments)}) -> {outcome}")
    return "\n".join(lines)


def _diff_text(diff: list[dict[str, Any]]) -> str:
    if not diff:
        return "(no change)"
    return "\n".join(
        f"- {entry['op']} {'/'.join(str(p) for p in entry['path'])}: "
        f"{json.dumps(entry.get('before'), default=str)} -> {json.dumps(entry.get('after'), default=str)}"
        for entry in diff
    )


def coverage_table(coverage: dict[str, ToolCoverage], cap: int) -> str:
    lines = ["tool | tested | positive | negative | passed | left"]
    for name, entry in coverage.items():
        left = max(0, cap - entry.total)
        lines.append(f"{name} | {entry.total} | {entry.positive} | {entry.negative} | {entry.passed} | {left}")
    return "\n".join(lines)


def allowed_tools(
    tools: list[str], tried: Counter[str], kinds: Counter[tuple[str, str]], cap: int, rounds_left: int
) -> tuple[list[str], str]:
    """The tools the tester may pick this round (``tried``: calls run per tool, ``kinds``: per tool and
    expectation), and the instruction that says why."""
    untested = [name for name in tools if tried[name] == 0]
    if untested and rounds_left <= len(untested):
        return untested, f"Only {rounds_left} round(s) left and these tools were never tested: pick one of them."
    open_tools = [name for name in tools if tried[name] < cap]
    if untested:
        return open_tools, f"Tools never tested yet (prefer them): {', '.join(untested)}."
    lacking = [name for name in open_tools if not kinds[(name, "success")] or not kinds[(name, "refusal")]]
    if lacking:
        return open_tools, f"Tools still missing a positive or a negative case (prefer them): {', '.join(lacking)}."
    return open_tools, "Every tool has been tested; probe the rules and edge cases further."


async def _propose(
    asker: Asker,
    render: dict[str, str],
    allowed: list[str],
    instruction: str,
    usage: Usage,
) -> ProposedCall | None:
    """A proposal for one of ``allowed``; None when the tester gives none within its tries."""
    tester = load_template("test_call")
    notice = ""
    for _try in range(PROPOSAL_TRIES):
        proposal = await asker.json(
            tester.render(**render, allowed=", ".join(allowed), instruction=instruction + notice),
            ProposedCall,
            "synth.assessment.tester",
            usage,
        )
        if proposal.tool in allowed:
            return proposal
        notice = f" Your proposal {proposal.tool!r} is not allowed this round: choose one of {', '.join(allowed)}."
        logger.debug("tester proposed %s outside %s", proposal.tool, allowed)
    return None


async def assess_environment(
    asker: Asker,
    pool: SandboxPool,
    environment: Environment,
    method_sources: dict[str, str],
    initial_state: dict[str, Any],
    *,
    rounds: int,
    threshold: float,
    attempt: int,
    usage: Usage,
    tests_per_tool: int = 10,
) -> AssessmentReport:
    checker = load_template("check_call")
    tools = environment.tool_names
    tools_text = json.dumps([t.model_dump(mode="json") for t in environment.tools], indent=1)
    rules_text = "\n".join(f"- {rule}" for rule in environment.rules)
    judged: list[AssessmentRound] = []
    tried: Counter[str] = Counter()
    kinds: Counter[tuple[str, str]] = Counter()
    unusable = 0
    rounds_run = 0
    session = await pool.open_session(environment, initial_state, seed=0)
    try:
        state = await session.state()
        shown = _clip(state)  # the state as prompts show it, serialized once per state
        for number in range(1, rounds + 1):
            allowed, instruction = allowed_tools(tools, tried, kinds, tests_per_tool, rounds - number + 1)
            if not allowed:
                break  # every tool reached its cap
            rounds_run += 1
            render = {
                "round": str(number),
                "rounds": str(rounds),
                "introduction": environment.introduction,
                "tools": tools_text,
                "state": shown,
                "coverage": coverage_table(tool_coverage(tools, judged), tests_per_tool),
                "history": _history_text(judged),
            }
            try:
                proposal = await _propose(asker, render, allowed, instruction, usage)
            except AnswerError as exc:
                logger.debug("round %d: no usable test call: %s", number, exc)
                proposal = None
            if proposal is None:
                unusable += 1
                continue
            tried[proposal.tool] += 1
            kinds[(proposal.tool, proposal.expect)] += 1
            before = shown
            observation, diff = await session.call(
                ToolCall(id=f"assess_{attempt}_{number}", name=proposal.tool, arguments=proposal.arguments)
            )
            state = await session.state()
            shown = _clip(state)
            diff_dicts = [d.model_dump(mode="json") for d in diff]
            try:
                judgement = await asker.json(
                    checker.render(
                        rules=rules_text,
                        tool=proposal.tool,
                        arguments=json.dumps(proposal.arguments, ensure_ascii=False),
                        expect=proposal.expect,
                        intent=proposal.intent or "no intent given",
                        source=method_sources.get(proposal.tool, NO_METHOD),
                        before=before,
                        diff=_diff_text(diff_dicts),
                        after=shown,
                        kind=observation.kind.value,
                        result=_clip(observation.content if observation.error is None else observation.error, 3000),
                    ),
                    Judgement,
                    "synth.assessment.checker",
                    usage,
                )
            except AnswerError as exc:
                logger.debug("round %d: no usable judgement: %s", number, exc)
                unusable += 1
                continue
            judged.append(
                AssessmentRound(
                    round=number,
                    tool=proposal.tool,
                    arguments=proposal.arguments,
                    expect=proposal.expect,
                    intent=proposal.intent,
                    observation_kind=observation.kind.value,
                    result=observation.content,
                    error=observation.error,
                    diff=diff_dicts,
                    verdict=judgement.verdict,
                    reason=judgement.reason,
                    tester_analysis=proposal.analysis,
                    checker_analysis=judgement.analysis,
                )
            )
    finally:
        await session.close()
    if not judged:
        raise AssessmentInconclusive(f"none of {rounds_run} rounds could be judged")
    good = sum(1 for item in judged if item.verdict != "fail")
    score = good / len(judged)
    coverage = tool_coverage(tools, judged)
    problems = []
    if score < threshold:
        problems.append(f"score {score:.2f} below threshold {threshold:.2f}")
    unexercised = [name for name, entry in coverage.items() if not entry.exercised]
    if unexercised:
        problems.append(f"tools never exercised: {', '.join(unexercised)}")
    if unusable * 2 > rounds_run:
        problems.append(f"{unusable} of {rounds_run} rounds had no usable test call or judgement")
    return AssessmentReport(
        attempt=attempt,
        rounds=judged,
        score=score,
        threshold=threshold,
        passed=not problems,
        tests_per_tool=tests_per_tool,
        coverage=coverage,
        unusable=unusable,
        problems=problems,
    )
