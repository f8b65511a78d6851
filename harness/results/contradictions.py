"""Records that contradict themselves: fields of one stored trajectory that cannot all be true.

A stored run may come from someone else, and ``harness rescore`` must not build on a record whose own fields
disagree. Only what the schema and the scoring code make certain is checked:

- an infrastructure error is never scored (``TerminationReason.INFRA_ERROR``), so it has no reward;
- an episode that ended without a final state (``infra_error``, ``environment_error``) has no check results;
- an environment failure is scored as a failure or not at all (``EpisodeRules.environment_failure``): its reward,
  if any, is 0 and not a success;
- ``checks_passed`` is at most ``checks_total``, and when check results are recorded the reward counts them
  (``RewardBreakdown.state_reward`` is checks passed / checks total);
- a success under rules whose success is every check holding (all but those that name one reward check) has no
  failed check and no check short of the total; under rules that name a reward check, that check held.
"""

from __future__ import annotations

from harness.rules.profiles import EpisodeRules
from harness.schema import TerminationReason, Trajectory

NO_FINAL_STATE = frozenset({TerminationReason.ENVIRONMENT_ERROR, TerminationReason.INFRA_ERROR})


def contradictions(trajectory: Trajectory, rules: EpisodeRules) -> list[str]:
    """What in ``trajectory`` contradicts the rest of it, one phrase per finding (none for a sound record)."""
    found: list[str] = []
    reward = trajectory.reward
    ending = trajectory.termination
    results = trajectory.check_results
    if ending is TerminationReason.INFRA_ERROR and reward is not None:
        found.append("it ended in an infrastructure error, which is never scored, yet it carries a reward")
    if ending in NO_FINAL_STATE and results:
        found.append(f"it ended without a final state ({ending.value}) yet carries {len(results)} check results")
    if ending is TerminationReason.ENVIRONMENT_ERROR and reward is not None and (reward.success or reward.state_reward):
        found.append(
            "its environment failed, which scores as a failure or not at all, yet its reward says "
            f"success={reward.success}, state_reward={reward.state_reward}"
        )
    if reward is None:
        return found
    if not 0 <= reward.checks_passed <= reward.checks_total:
        found.append(f"its reward counts {reward.checks_passed} of {reward.checks_total} checks passed")
    passed = sum(result.passed for result in results)
    if results and (reward.checks_total, reward.checks_passed) != (len(results), passed):
        found.append(
            f"its reward counts {reward.checks_passed} of {reward.checks_total} checks passed, its check results "
            f"{passed} of {len(results)}"
        )
    if reward.success:
        if rules.reward_check is None:
            failed = [result.check_id for result in results if not result.passed]
            if failed:
                found.append(f"it is a success with failed checks ({', '.join(failed[:5])}) under rules that need all")
            elif reward.checks_passed < reward.checks_total:
                found.append(
                    f"it is a success with {reward.checks_passed} of {reward.checks_total} checks passed under rules "
                    "that need all"
                )
        elif any(result.check_id == rules.reward_check and not result.passed for result in results):
            found.append(f"it is a success although its reward check {rules.reward_check!r} failed")
    return found
