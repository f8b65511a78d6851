"""Traces training can trust: optional policy tokens that leave older records as they were, and failures
blamed on the simulated user counted apart in the run summary."""

from __future__ import annotations

from harness.episode.blame import classify_failure
from harness.llm import LLMError
from harness.results.tally import summarize_group
from harness.schema import (
    AgentSettings,
    Failure,
    FailureParty,
    ModelSettings,
    PolicyTokens,
    TerminationReason,
    Trajectory,
)


def record(termination: TerminationReason = TerminationReason.AGENT_DONE, **fields: object) -> Trajectory:
    return Trajectory(
        episode_id="e",
        scenario_id="s",
        environment_id="env",
        mode="conv",
        agent=AgentSettings(kind="k", model=ModelSettings(model="m")),
        termination=termination,
        **fields,  # type: ignore[arg-type]
    )


def test_a_record_without_policy_tokens_dumps_as_before_and_one_with_them_keeps_them() -> None:
    plain = record()
    dumped = plain.model_dump(mode="json")
    assert "policy_tokens" not in dumped
    assert Trajectory.model_validate(dumped).model_dump(mode="json") == dumped
    tokens = PolicyTokens(prompt_ids=[1, 2], completion_ids=[3, 4, 5], logprobs=[-0.1, 0.0, -0.2], env_mask=[1, 0, 1])
    with_tokens = record(policy_tokens=tokens)
    assert Trajectory.model_validate_json(with_tokens.model_dump_json()).policy_tokens == tokens


def test_a_failing_user_simulator_is_blamed_and_its_share_reported() -> None:
    blame = classify_failure(LLMError("user model down"), "user")
    assert blame.reason is TerminationReason.INFRA_ERROR
    assert blame.failure is not None and blame.failure.at_fault is FailureParty.USER_SIMULATOR
    agent = classify_failure(LLMError("agent model down"), "agent")
    assert agent.failure is not None and agent.failure.at_fault is FailureParty.MODEL_ENDPOINT
    raising_policy = classify_failure(RuntimeError("bug in the user policy"), "user")
    assert raising_policy.failure is not None and raising_policy.failure.at_fault is FailureParty.USER_SIMULATOR

    def failed(party: FailureParty, termination: TerminationReason) -> Trajectory:
        return record(termination, failure=Failure(at_fault=party, detail="x"))

    summary = summarize_group(
        [
            failed(FailureParty.USER_SIMULATOR, TerminationReason.INFRA_ERROR),
            failed(FailureParty.MODEL_ENDPOINT, TerminationReason.INFRA_ERROR),
            failed(FailureParty.ENVIRONMENT, TerminationReason.ENVIRONMENT_ERROR),
            failed(FailureParty.USER_SIMULATOR, TerminationReason.INFRA_ERROR),
            record(),
        ]
    )
    assert summary.user_simulator_failures == 2
    assert summary.user_simulator_failure_share == 0.5
    assert summarize_group([record()]).user_simulator_failure_share is None
