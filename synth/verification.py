"""Proof that a chain-made scenario is solvable from its request, and a reference with only the calls it needs.

The reference gate alone replays the very chain that produced the gold state, so it passes by construction.
Here (EnvFactory's verification step):

- :func:`minimize_reference` drops the calls the reference does not need: a state-changing call whose removal
  still replays and still satisfies every check, and a read call whose result no later call uses (unless it
  ends its turn: then its result is what the person asked for).
- :func:`verify_by_rollouts` lets a solver model attempt the scenario ``k`` times from the request alone; the
  scenario is kept when at least one rollout reaches the gold state (every check passes), and the solve rate
  is recorded as its difficulty.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.sandbox import SandboxPool
from harness.schema import Environment, ModelSettings, ReferenceAction, Scenario, ToolCall, Usage
from synth.gates import GateOutcome
from synth.mentions import CallFacts, mentions, scalar_texts

if TYPE_CHECKING:
    from harness.llm import LLMClient
    from harness.schema import Trajectory

SOLVER_ROLE = "solver"


async def replay(
    pool: SandboxPool, environment: Environment, state: dict[str, Any], actions: Sequence[ReferenceAction]
) -> dict[str, Any] | None:
    """The final state after ``actions``, or None when one of them is refused."""
    session = await pool.open_session(environment, state)
    try:
        for number, action in enumerate(actions):
            observation, _ = await session.call(
                ToolCall(id=f"replay_{number}", name=action.name, arguments=dict(action.arguments))
            )
            if not observation.ok:
                return None
        return await session.state()
    finally:
        await session.close()


def _feeds_a_later_call(index: int, calls: Sequence[CallFacts], kept: list[int], task: str) -> bool:
    """A value of this call's result is an argument of a later kept call that the request does not say."""
    produced = {text for text in scalar_texts(calls[index].result) if len(text) >= 3}
    return any(
        text in produced and not mentions(task, text)
        for later in kept
        if later > index
        for text in scalar_texts(calls[later].arguments)
    )


def _ends_its_turn(index: int, calls: Sequence[CallFacts], turns: Sequence[Sequence[int]]) -> bool:
    turn = next((t for t in turns if index in t), [index])
    return not any(calls[i].changed_state for i in turn if i > index)


async def minimize_reference(
    pool: SandboxPool,
    environment: Environment,
    scenario: Scenario,
    calls: Sequence[CallFacts],
    turns: Sequence[Sequence[int]],
) -> Scenario:
    """``scenario`` with the reference calls it does not need removed (greedy, last call first) and the gold
    state of the shorter reference; the removed calls are listed in provenance under ``dropped_calls``."""
    assert len(calls) == len(scenario.reference_actions)
    actions = scenario.reference_actions
    kept = list(range(len(calls)))
    for index in reversed(range(len(calls))):
        if not calls[index].changed_state and (
            _ends_its_turn(index, calls, turns) or _feeds_a_later_call(index, calls, kept, scenario.task)
        ):
            continue
        candidate = [i for i in kept if i != index]
        if not calls[index].changed_state:
            # A read changes nothing, so the state without it is the same; the reference gate replays the result.
            kept = candidate
            continue
        final = await replay(pool, environment, scenario.initial_state, [actions[i] for i in candidate])
        if final is None:
            continue
        results = await pool.run_checks(scenario.checks, scenario.initial_state, final)
        if all(r.passed for r in results):
            kept = candidate
    if len(kept) == len(calls):
        return scenario
    shorter = [actions[i] for i in kept]
    gold = await replay(pool, environment, scenario.initial_state, shorter)
    assert gold is not None, "a reference that replayed while being shortened replays again"
    dropped = [{"index": i, "name": calls[i].name, "arguments": calls[i].arguments} for i in range(len(calls))]
    dropped = [entry for entry in dropped if entry["index"] not in kept]
    tags = [t for t in scenario.tags if not t.startswith("calls:")] + [f"calls:{len(shorter)}"]
    details = {**scenario.provenance.details, "dropped_calls": dropped}
    return scenario.model_copy(
        update={
            "reference_actions": shorter,
            "gold_final_state": gold,
            "tags": tags,
            "provenance": scenario.provenance.model_copy(update={"details": details}),
        }
    )


def difficulty_of(solve_rate: float) -> str:
    if solve_rate >= 2 / 3:
        return "easy"
    if solve_rate >= 1 / 3:
        return "medium"
    return "hard"


async def verify_by_rollouts(
    pool: SandboxPool,
    client: LLMClient,
    environment: Environment,
    scenario: Scenario,
    solver: ModelSettings,
    rollouts: int,
    usage: Usage,
) -> tuple[GateOutcome, Scenario]:
    """``rollouts`` episodes of a function-calling solver on the scenario's whole request; see the module
    docstring. The returned scenario carries the solve rate (``difficulty``, a ``solve_rate:`` tag and
    ``provenance.details["rollouts"]``)."""
    from agents.factory import build_agent
    from harness.episode_factory import EpisodeFactory, EpisodeRecipe
    from harness.library import Library

    factory = EpisodeFactory(EpisodeRecipe(), Library.of([environment], [scenario], source="synthesis"), pool)

    async def rollout(number: int) -> Trajectory:
        # A seed per rollout: k distinct samples, and k distinct entries in the response cache (not one, k times).
        settings = solver.model_copy(update={"seed": (solver.seed or 0) + number})
        agent = build_agent("function_calling", settings, client, role=SOLVER_ROLE)
        return await factory.play(
            scenario, agent, seed=number, trial=number, episode_id=f"{scenario.id}-rollout-{number}"
        )

    trajectories = await asyncio.gather(*(rollout(number) for number in range(rollouts)))
    outcomes: list[str] = []
    solved = counted = 0
    for trajectory in trajectories:
        for spent in trajectory.usage.values():
            usage.add(spent)
        if trajectory.infra_error:
            outcomes.append(f"infrastructure error: {trajectory.termination_detail or 'unknown'}")
            continue
        counted += 1
        reward = trajectory.reward
        success = reward is not None and reward.success
        solved += success
        checks = f" {reward.checks_passed}/{reward.checks_total} checks" if reward is not None else ""
        outcomes.append(f"{trajectory.termination.value}{checks}")
    details: dict[str, Any] = {"solver": solver.model, "rollouts": rollouts, "solved": solved, "outcomes": outcomes}
    if not counted:
        return GateOutcome(gate="rollouts", passed=False, reason="no rollout could run", details=details), scenario
    rate = solved / counted
    details["solve_rate"] = round(rate, 4)
    if not solved:
        reason = f"none of {counted} rollouts by {solver.model} reached the gold state ({'; '.join(outcomes)})"
        return GateOutcome(gate="rollouts", passed=False, reason=reason, details=details), scenario
    verified = scenario.model_copy(
        update={
            "difficulty": difficulty_of(rate),
            "tags": [*scenario.tags, f"solve_rate:{rate:.2f}"],
            "provenance": scenario.provenance.model_copy(
                update={"details": {**scenario.provenance.details, "rollouts": details}}
            ),
        }
    )
    return GateOutcome(gate="rollouts", passed=True, details=details), verified
