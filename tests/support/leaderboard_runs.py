"""Builders of hand-made trajectories and run folders for the metrics and leaderboard tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.schema import (
    AgentSettings,
    CheckResult,
    DatasetRef,
    DiffEntry,
    ModelSettings,
    Observation,
    ObservationKind,
    RewardBreakdown,
    RunManifest,
    Step,
    TerminationReason,
    ToolCall,
    Trajectory,
    Usage,
)

INFRA = TerminationReason.INFRA_ERROR


def make_trajectory(
    episode_id: str,
    *,
    scenario_id: str = "s1",
    environment_id: str = "retail_orders",
    mode: str = "nonconv",
    trial: int = 0,
    model: str = "model-a",
    temperature: float = 0.0,
    state_reward: float | None = 1.0,
    success: bool | None = None,
    delta_reward: float | None = None,
    termination: TerminationReason = TerminationReason.AGENT_DONE,
    cost_usd: float = 0.01,
    prompt_tokens: int = 100,
    completion_tokens: int = 20,
    tool_calls: int = 1,
    assistant_text: str = "Done.",
    failing_check_error: str | None = None,
    user_model: str | None = None,
) -> Trajectory:
    """A complete, plausible trajectory; ``state_reward=None`` or an infra termination leaves it unscored."""
    infra = termination is TerminationReason.INFRA_ERROR
    checks_total = 4
    reward = None
    check_results: list[CheckResult] = []
    if state_reward is not None and not infra:
        passed = round(state_reward * checks_total)
        reward = RewardBreakdown(
            state_reward=state_reward,
            delta_reward=delta_reward,
            success=(state_reward == 1.0) if success is None else success,
            checks_passed=passed,
            checks_total=checks_total,
        )
        check_results = [
            CheckResult(
                check_id=f"c{index}",
                passed=index < passed,
                value=None if index < passed else "False",
                error=None if index < passed else failing_check_error,
                passed_at_reset=index == 0,
            )
            for index in range(checks_total)
        ]
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": f"Please handle task {scenario_id}."},
    ]
    steps: list[Step] = []
    for index in range(tool_calls):
        call_id = f"call_{index}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "cancel_order", "arguments": '{"order_id": "O-1"}'},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "name": "cancel_order", "content": '{"ok": true}'})
        steps.append(
            Step(
                index=index,
                turn=index,
                call=ToolCall(id=call_id, name="cancel_order", arguments={"order_id": "O-1"}),
                observation=Observation(
                    tool_call_id=call_id,
                    name="cancel_order",
                    kind=ObservationKind.OK,
                    content={"success": True},
                ),
                state_diff=[DiffEntry(path=["orders", "O-1", "status"], op="change", before="pending", after="x")],
            )
        )
    messages.append({"role": "assistant", "content": assistant_text})
    usage = {
        "agent": Usage(
            requests=tool_calls + 1,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=cost_usd,
        )
    }
    return Trajectory(
        episode_id=episode_id,
        run_id="run",
        scenario_id=scenario_id,
        environment_id=environment_id,
        mode=mode,  # type: ignore[arg-type]
        trial=trial,
        agent=AgentSettings(model=ModelSettings(model=model, temperature=temperature, seed=trial)),
        user=AgentSettings(role="user", model=ModelSettings(model=user_model)) if user_model else None,
        messages=messages,
        steps=steps,
        final_state_diff=[step.state_diff[0] for step in steps[:1]],
        check_results=check_results,
        reward=reward,
        termination=termination,
        termination_detail="sandbox worker died" if infra else None,
        usage=usage,
        errors=["SandboxError: worker died"] if infra else [],
    )


def write_run(
    run_dir: Path,
    trajectories: Sequence[Trajectory],
    *,
    run_id: str | None = None,
    dataset: DatasetRef | None = None,
    config: dict[str, object] | None = None,
    tail: str = "",
) -> Path:
    """Write manifest.json and results.jsonl (one line per trajectory, in order, then ``tail``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = RunManifest(
        run_id=run_id or run_dir.name,
        package_version="0.1.0",
        git_revision="0123456789abcdef",
        dataset=dataset or DatasetRef(source="datasets/seed", revision="rev1", fingerprint="f" * 16),
        config=config or {},
        episodes_planned=len({t.episode_id for t in trajectories}),
    )
    (run_dir / "manifest.json").write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    lines = "".join(t.model_dump_json() + "\n" for t in trajectories)
    (run_dir / "results.jsonl").write_text(lines + tail, encoding="utf-8")
    return run_dir


XSS_TEXT = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'
XSS_CHECK_ERROR = "</pre><script>alert(2)</script>"

# (scenario, environment, mode) -> rewards per trial; None marks an infrastructure error
Plan = dict[tuple[str, str, str], list[float | None]]
MODEL_A: Plan = {
    ("s1", "retail_orders", "nonconv"): [1.0, 1.0],
    ("s2", "retail_orders", "nonconv"): [0.5, 1.0],
    ("s3", "airline_booking", "nonconv"): [0.0, 0.0],
    ("s3", "airline_booking", "conv"): [1.0, 1.0, None],
}
MODEL_B: Plan = {
    ("s1", "retail_orders", "nonconv"): [1.0, 1.0],
    ("s2", "retail_orders", "nonconv"): [0.25, 0.25],
    ("s3", "airline_booking", "nonconv"): [0.25, 0.25],
    ("s3", "airline_booking", "conv"): [0.25, 0.25],
}
ONE_EPISODE: Plan = {("s1", "retail_orders", "nonconv"): [1.0]}
REV1 = DatasetRef(source="handmade-set", revision="rev1", fingerprint="a" * 16)
REV2 = DatasetRef(source="handmade-set", revision="rev2", fingerprint="b" * 16)


def _run_trajectories(model: str, plan: Plan, cost: float) -> list[Trajectory]:
    trajectories = []
    for (scenario, environment, mode), rewards in plan.items():
        for trial, reward in enumerate(rewards):
            failing = reward is not None and reward < 1.0
            trajectories.append(
                make_trajectory(
                    f"{model}-{scenario}-{mode}-{trial}",
                    scenario_id=scenario,
                    environment_id=environment,
                    mode=mode,
                    trial=trial,
                    model=model,
                    state_reward=reward,
                    termination=INFRA if reward is None else TerminationReason.AGENT_DONE,
                    cost_usd=cost,
                    user_model="user-sim" if mode == "conv" else None,
                    assistant_text=XSS_TEXT if failing else "All done.",
                    failing_check_error=XSS_CHECK_ERROR if failing else None,
                )
            )
    return trajectories


def write_sample_runs(root: Path) -> dict[str, Path]:
    """Three runs: model-a and model-b on revision rev1 of one environment set, model-a again on rev2.

    Run a also holds a retried episode whose first line was an infrastructure error.
    """
    a = _run_trajectories("model-a", MODEL_A, cost=0.02)
    retried = make_trajectory(
        "model-a-s1-nonconv-0",
        scenario_id="s1",
        environment_id="retail_orders",
        model="model-a",
        termination=INFRA,
    )
    return {
        "a": write_run(root / "run-a", [retried, *a], dataset=REV1),
        "b": write_run(root / "run-b", _run_trajectories("model-b", MODEL_B, cost=0.001), dataset=REV1),
        "c": write_run(root / "run-c", _run_trajectories("model-a", ONE_EPISODE, 0.02), dataset=REV2),
    }
