"""Assessment: EnvScaler's dual-agent loop, run against the class in the sandbox.

Each round a testing agent, which sees only what an agent would (introduction, tools, current state),
proposes one call and says whether it expects success or refusal. The call runs in the sandbox. A checking
agent, which sees the rules, the method's source, the state before and after, the diff and the return value,
judges Pass, Warning or Fail. The score is (pass + warning) / judged rounds.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from harness.sandbox import SandboxPool
from harness.schema import Environment, ToolCall, Usage
from synth.answers import AnswerError, Asker
from synth.records import AssessmentReport, AssessmentRound, Judgement, ProposedCall
from synth.templates import load_template

logger = logging.getLogger(__name__)

STATE_CHARS = 6000
HISTORY_SHOWN = 12
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
) -> AssessmentReport:
    tester = load_template("test_call")
    checker = load_template("check_call")
    tools_text = json.dumps([t.model_dump(mode="json") for t in environment.tools], indent=1)
    rules_text = "\n".join(f"- {rule}" for rule in environment.rules)
    judged: list[AssessmentRound] = []
    unusable = 0
    session = await pool.open_session(environment, initial_state, seed=0)
    try:
        state = await session.state()
        for number in range(1, rounds + 1):
            try:
                proposal = await asker.json(
                    tester.render(
                        round=str(number),
                        rounds=str(rounds),
                        introduction=environment.introduction,
                        tools=tools_text,
                        state=_clip(state),
                        history=_history_text(judged),
                    ),
                    ProposedCall,
                    "synth.assessment.tester",
                    usage,
                )
            except AnswerError as exc:
                logger.debug("round %d: no usable test call: %s", number, exc)
                unusable += 1
                continue
            before = state
            observation, diff = await session.call(
                ToolCall(id=f"assess_{attempt}_{number}", name=proposal.tool, arguments=proposal.arguments)
            )
            state = await session.state()
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
                        before=_clip(before),
                        diff=_diff_text(diff_dicts),
                        after=_clip(state),
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
                )
            )
    finally:
        await session.close()
    if not judged or unusable * 2 > rounds:
        raise AssessmentInconclusive(f"only {len(judged)} of {rounds} rounds could be judged")
    good = sum(1 for item in judged if item.verdict != "fail")
    score = good / len(judged)
    return AssessmentReport(attempt=attempt, rounds=judged, score=score, threshold=threshold, passed=score >= threshold)
