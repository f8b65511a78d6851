"""LLM-judged checks: after an episode, in the harness process (the jail has no network), the judge is asked
each of the scenario's judged checks and its verdicts join the checks' results before the rules make the reward.

A judged check's ``kind`` is declared by a benchmark package (``Benchmark.judge_kinds``), whose two pure functions
say what the judge is sent (``request``) and how the benchmark's evaluator reads its reply (``parse``); the engine
only asks the judge, through the one door to models (role ``judge``: limits, retries, cache and cost), and stores
every request and reply on the trajectory (``Trajectory.judge``). A judge that gives no reply after the client's
retries is an infrastructure error (``--retry-errors`` runs the episode again), never a score; a reply the
evaluator cannot read is what the kind's ``parse`` says: verdicts (a failed item, say), or :class:`UnreadableReply`
when the benchmark's rule is that the episode then has no score. ``harness rescore`` replays the stored replies
(no request) or, given a judge, asks it again.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol

from harness.episode.blame import model_failure_kind
from harness.episode.verdict import EndedEpisode, rules_give_zero, rules_reward
from harness.llm import LLMClient, LLMError
from harness.registry import judge_kind
from harness.rules.profiles import EpisodeRules
from harness.schema import (
    CheckResult,
    Environment,
    Failure,
    FailureKind,
    FailureParty,
    JudgedCheck,
    JudgeExchange,
    JudgeRecord,
    JudgeVerdict,
    ModelSettings,
    Scenario,
    TerminationReason,
    Trajectory,
    Usage,
)
from harness.scoring.checks import check_transcript, reward_from_results
from harness.scoring.reward import CompositeWeights, final_state_of

JUDGE_ROLE = "judge"
"""The role the judge's requests are counted under (usage and cost per role)."""

JUDGE_TEMPERATURE = 0.0
"""The judge's sampling temperature unless a benchmark's check says otherwise: a verdict should not be drawn."""


class UnreadableReply(ValueError):
    """Raised by a judge kind's ``parse`` when the benchmark's evaluator cannot read the reply and its rule is that
    the episode then has no score (the message says why)."""


class UnknownJudgeKind(ValueError):
    """A judged check names a kind no installed benchmark declares, or whose functions do not load."""


class JudgeFunctions(Protocol):
    """What a benchmark package gives for a judge kind: two pure functions of the check."""

    def request(self, check: JudgedCheck, transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages the judge is sent, from the check and the episode's messages after the system prompt."""
        ...

    def parse(self, check: JudgedCheck, reply: str) -> list[JudgeVerdict]:
        """The verdicts the benchmark's evaluator reads from the reply; raises :class:`UnreadableReply` when its rule
        is that the episode then has no score."""
        ...


def judge_functions(kind: str) -> JudgeFunctions:
    """The functions of the judge kind ``kind`` (imported on first use)."""
    declared = judge_kind(kind)
    if declared is None:
        raise UnknownJudgeKind(f"judge kind {kind!r} is not declared by any installed benchmark")
    module, _, attribute = declared.functions.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise UnknownJudgeKind(f"judge kind {kind!r}: {declared.functions} does not load ({exc})") from None
    if not callable(getattr(found, "request", None)) or not callable(getattr(found, "parse", None)):
        raise UnknownJudgeKind(f"judge kind {kind!r}: {declared.functions} has no request and parse functions")
    functions: JudgeFunctions = found
    return functions


def judged_check_problems(scenarios: list[Scenario], judge_model: str | None) -> list[str]:
    """Why these scenarios cannot be judged as asked: judged checks and no judge, or kinds nobody declares."""
    problems: list[str] = []
    judged = [s for s in scenarios if s.judged_checks]
    if judged and judge_model is None:
        problems.append(
            f"{len(judged)} scenario(s) have LLM-judged checks (e.g. {judged[0].id}): give --judge-model MODEL"
        )
    for kind in sorted({c.kind for s in judged for c in s.judged_checks}):
        try:
            judge_functions(kind)
        except UnknownJudgeKind as exc:
            problems.append(str(exc))
    return problems


@dataclass(frozen=True)
class Judge:
    """A judge: a model (an alias like any other) called through ``client`` under the role ``judge``."""

    client: LLMClient
    settings: ModelSettings

    @classmethod
    def of(cls, client: LLMClient, model: str, seed: int | None = None) -> Judge:
        return cls(client, ModelSettings(model=model, temperature=JUDGE_TEMPERATURE, seed=seed))

    def pinned(self) -> dict[str, Any]:
        """The judge as a manifest pins it: its alias and parameters."""
        return self.settings.model_dump(mode="json", exclude_defaults=False)

    def record(self) -> JudgeRecord:
        settings = self.settings.model_dump(mode="json", exclude={"model", "extra"})
        return JudgeRecord(judge_model=self.settings.model, settings=settings)


class JudgeFailed(Exception):
    """The judge gave no verdict: the episode is an infrastructure error (``failure`` says whose and why)."""

    def __init__(self, failure: Failure, record: JudgeRecord, usage: Usage) -> None:
        super().__init__(failure.detail)
        self.failure = failure
        self.record = record
        self.usage = usage
        """What the judge's requests before the failure cost."""


class JudgeNotRecorded(Exception):
    """A replay found no stored reply to what a judged check asks now."""


async def judge_checks(
    checks: list[JudgedCheck],
    transcript: list[dict[str, Any]],
    judge: Judge | None,
    stored: JudgeRecord | None = None,
) -> tuple[list[CheckResult], JudgeRecord, Usage]:
    """One result per judged check, the record of what the judge was asked and answered, and what it cost.

    Without ``judge`` the stored replies are read again (a replay: no request; :class:`JudgeNotRecorded` when a
    check asks what no stored exchange answers)."""
    if judge is not None:
        record = judge.record()
    else:
        record = JudgeRecord(
            judge_model=stored.judge_model if stored else None, settings=stored.settings if stored else {}
        )
    usage = Usage()
    results: list[CheckResult] = []
    for check in checks:
        functions = judge_functions(check.kind)
        request = functions.request(check, transcript)
        exchange = JudgeExchange(check_id=check.id, kind=check.kind, request=request)
        if judge is None:
            previous = stored.exchange(check.id) if stored is not None else None
            if previous is None or previous.request != request or previous.reply is None:
                raise JudgeNotRecorded(
                    f"judged check {check.id!r}: the record holds no reply to what it asks now (give --judge-model "
                    "to judge it)"
                )
            exchange = exchange.model_copy(
                update={"reply": previous.reply, "model": previous.model, "cached": previous.cached, "replayed": True}
            )
        else:
            try:
                answer = await judge.client.chat(judge.settings, request, role=JUDGE_ROLE)
            except LLMError as exc:
                record.exchanges.append(exchange)
                detail = f"judge: {type(exc).__name__}: {exc}"
                failure = Failure(at_fault=FailureParty.JUDGE, detail=detail, kind=model_failure_kind(exc))
                raise JudgeFailed(failure, record, usage) from exc
            usage.add(answer.usage)
            content = answer.message.get("content")
            reply = content if isinstance(content, str) else ""
            exchange = exchange.model_copy(update={"reply": reply, "model": answer.model, "cached": answer.cached})
        assert exchange.reply is not None
        try:
            verdicts = functions.parse(check, exchange.reply)
        except UnreadableReply as exc:
            record.exchanges.append(exchange.model_copy(update={"unreadable": str(exc)}))
            detail = f"judge: the reply to judged check {check.id!r} cannot be read: {exc}"
            failure = Failure(at_fault=FailureParty.JUDGE, detail=detail, kind=FailureKind.JUDGE_REPLY)
            raise JudgeFailed(failure, record, usage) from None
        record.exchanges.append(exchange.model_copy(update={"verdicts": verdicts}))
        failed = [verdict.item for verdict in verdicts if not verdict.holds]
        results.append(
            CheckResult(check_id=check.id, passed=not failed, value=f"not met: {failed!r}" if failed else None)
        )
    return results, record, usage


async def judged_trajectory(
    trajectory: Trajectory,
    scenario: Scenario,
    environment: Environment,
    rules: EpisodeRules,
    judge: Judge | None,
    *,
    weights: CompositeWeights | None = None,
    seed: int = 0,
) -> Trajectory:
    """``trajectory`` with its scenario's judged checks decided and the reward the rules make of every result; an
    infrastructure error when the judge gives no verdict. Without ``judge`` the trajectory's stored replies are
    replayed. Episodes that ended in a failure, or that the rules score 0 without their checks, are left as they
    are (as upstream evaluators judge nothing then)."""
    if not scenario.judged_checks or trajectory.infra_error or trajectory.environment_error:
        return trajectory
    if rules_give_zero(rules, trajectory.termination):
        return trajectory
    usage = dict(trajectory.usage)
    try:
        results, record, spent = await judge_checks(
            scenario.judged_checks, check_transcript(trajectory.messages), judge, trajectory.judge
        )
    except JudgeFailed as failed:
        if judge is not None:
            usage[JUDGE_ROLE] = failed.usage
        return trajectory.model_copy(
            update={
                "termination": TerminationReason.INFRA_ERROR,
                "termination_detail": failed.failure.detail,
                "failure": failed.failure,
                "check_results": [],
                "reward": None,
                "judge": failed.record,
                "usage": usage,
                "errors": [*trajectory.errors, failed.failure.detail],
            }
        )
    if judge is not None:
        usage[JUDGE_ROLE] = spent
    combined = [*trajectory.check_results, *results]
    ended = EndedEpisode(
        scenario=scenario,
        environment=environment,
        rules=rules,
        termination=trajectory.termination,
        messages=trajectory.messages,
        calls=[step.call for step in trajectory.steps],
        seed=seed,
        scripted=False,
        weights=weights or CompositeWeights(),
    )
    final_state = final_state_of(scenario, trajectory) if rules.composite_reward else None
    reward = rules_reward(reward_from_results(combined, rules), combined, ended, final_state)
    return trajectory.model_copy(update={"check_results": combined, "reward": reward, "judge": record, "usage": usage})


__all__ = [
    "JUDGE_ROLE",
    "Judge",
    "JudgeFailed",
    "JudgeFunctions",
    "JudgeNotRecorded",
    "UnknownJudgeKind",
    "UnreadableReply",
    "judge_checks",
    "judge_functions",
    "judged_check_problems",
    "judged_trajectory",
]
