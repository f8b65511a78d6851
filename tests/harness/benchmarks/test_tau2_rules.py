"""`--rules tau2` on the airline library imported from the real wheel, through the real CLI: the oracle scores every
task 1.0; scripted agents (the mock OpenAI server) that make each kind of mistake get upstream's reward, 0 where
its termination gate applies; the user sees upstream's view; the rules are refused where they cannot apply; pass^k
is upstream's formula, read from the wheel."""

from __future__ import annotations

import ast
import math
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.benchmarks.tau2.rules import TAU2_AGENT_GREETING, TAU2_RULES
from harness.episode.config import EpisodeConfig
from harness.episode.message_limits import MessageLimits
from harness.episode.tool_messages import observation_content
from harness.library import load_library
from harness.results.tally import pass_hat_k_curve
from harness.schema import Observation, ObservationKind, Scenario, TerminationReason
from tests.doubles.mock_openai import MockOpenAIServer, ReplayPolicy, SimulatedUserPolicy
from tests.harness.benchmarks.test_tau2_import import airline_library, tau2_wheel  # noqa: F401  (fixtures)
from tests.support.cli_process import Finished, harness
from tests.support.leaderboard_runs import make_trajectory

USER_OPENING = "Hello, I need some help with a reservation."
CANCEL_TASK = "tau2-airline-19"  # gold: one cancel_reservation, nothing to communicate
CHANGE_TASK = "tau2-airline-11"  # gold: one update_reservation_flights, and the user must be told 5244


@pytest.fixture(scope="module")
def server() -> Iterator[MockOpenAIServer]:
    mock = MockOpenAIServer()
    mock.set_policy("tau2-user", SimulatedUserPolicy(turns=[USER_OPENING]))
    with mock.running_in_thread():
        yield mock


def aliases(path: Path, base_url: str, agent_policy: str) -> Path:
    lines = []
    for alias, model in (("mock-agent", agent_policy), ("mock-user", "tau2-user")):
        lines += [f"[aliases.{alias}]", f'model = "hosted_vllm/{model}"', f'api_base = "{base_url}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def run_tau2(library: Path, out: Path, server: MockOpenAIServer, *args: str, agent: str = "oracle") -> Finished:
    models = aliases(out.parent / f"{out.name}-models.toml", server.base_url, agent)
    command = ["run", "--envs", str(library), "--out", str(out), "--rules", "tau2", "--mode", "conv"]
    command += ["--model", "mock-agent", "--user-model", "mock-user", "--concurrency", "2", *args]
    command += ["--agent", "oracle" if agent == "oracle" else "function_calling"]
    return harness(command, {"HARNESS_MODELS_FILE": str(models)})


def results(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]


def scenario(library: Path, scenario_id: str) -> Scenario:
    return next(s for s in load_library(library).scenarios if s.id == scenario_id)


def scripted_episode(
    library: Path, tmp_path: Path, server: MockOpenAIServer, case: str, actions: list[Any], reply: str, *args: str
) -> dict[str, Any]:
    """One episode of ``CANCEL_TASK`` or ``CHANGE_TASK`` (in ``args``) by a model that makes ``actions``, one per
    turn, then says ``reply``."""
    server.set_policy(case, ReplayPolicy(actions=actions, final_text=reply))
    finished = run_tau2(library, tmp_path / case, server, *args, agent=case)
    assert finished.code == 0, finished.stderr
    (episode,) = results(tmp_path / case)
    return episode


def test_the_oracle_scores_every_airline_task_one_under_tau2_rules(
    airline_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    out = tmp_path / "oracle"
    finished = run_tau2(airline_library, out, server)
    assert finished.code == 0, finished.stderr
    episodes = results(out)
    assert len(episodes) == 50
    assert {e["termination"] for e in episodes} == {"user_stop"}
    assert all(e["reward"]["state_reward"] == 1.0 and e["reward"]["success"] for e in episodes)
    for episode in episodes:
        system, greeting, opening = episode["messages"][:3]
        assert system["content"].startswith("<instructions>") and "<policy>" in system["content"]
        assert greeting == {"role": "assistant", "content": TAU2_AGENT_GREETING}
        assert opening["role"] == "user" and opening["content"] == USER_OPENING
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["config"]["rules"] == "tau2"
    # What the simulated user was sent: upstream's guidelines and the task as its scenario, the agent's greeting as
    # the first message to answer, and never a tool call or a tool result.
    user_requests = [r.body for r in server.chat_requests("tau2-user") if r.body and len(r.body["messages"]) > 1]
    assert user_requests
    for body in user_requests:
        messages = body["messages"]
        assert messages[0]["role"] == "system" and "<scenario>" in messages[0]["content"]
        assert messages[1] == {"role": "user", "content": TAU2_AGENT_GREETING}
        assert all(m["role"] in ("system", "user", "assistant") and not m.get("tool_calls") for m in messages)


def test_a_correct_agent_scores_one_and_each_mistake_scores_what_upstream_gives(
    airline_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    cancel = scenario(airline_library, CANCEL_TASK)
    (gold_cancel,) = [a.model_dump() for a in cancel.reference_actions]
    reservation = gold_cancel["arguments"]["reservation_id"]
    other = next(r for r in cancel.initial_state["db"]["reservations"] if r != reservation)
    change = scenario(airline_library, CHANGE_TASK)
    gold_change = [a.model_dump() for a in change.reference_actions]
    on_cancel = ("--scenario", CANCEL_TASK)
    on_change = ("--scenario", CHANGE_TASK)

    def play(case: str, actions: list[Any], reply: str, *args: str) -> dict[str, Any]:
        return scripted_episode(airline_library, tmp_path, server, case, actions, reply, *args)

    right = play("right", [gold_cancel], "Your reservation is cancelled.", *on_cancel)
    assert (right["termination"], right["reward"]["state_reward"]) == ("user_stop", 1.0)

    wrong_argument = {"name": "cancel_reservation", "arguments": {"reservation_id": other}}
    wrong = play("wrong-argument", [wrong_argument], "Your reservation is cancelled.", *on_cancel)
    assert (wrong["termination"], wrong["reward"]["state_reward"], wrong["reward"]["success"]) == (
        "user_stop",
        0.0,
        False,
    )

    missing = play("missing-write", [], "Your reservation is cancelled.", *on_cancel)
    assert (missing["termination"], missing["reward"]["state_reward"]) == ("user_stop", 0.0)

    # Upstream removes the message's commas before looking for the information, so "5,244" tells the user 5244.
    told = play("told", gold_change, "Done: the fare difference of 5,244 dollars is charged.", *on_change)
    assert (told["termination"], told["reward"]["state_reward"]) == ("user_stop", 1.0)
    wrong_info = play("wrong-info", gold_change, "Done: the fare difference of 5245 dollars is charged.", *on_change)
    silent = play("missing-info", gold_change, "Done: your flights are changed.", *on_change)
    for episode in (wrong_info, silent):
        # The database is the gold's, the information is not there: the product of the two factors is 0.
        assert episode["termination"] == "user_stop"
        assert episode["reward"]["checks_passed"] == episode["reward"]["checks_total"] - 1
        assert episode["reward"]["state_reward"] == 0.0


def test_limits_and_endings_without_a_stop_score_zero_even_with_the_gold_database(
    airline_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    cancel = scenario(airline_library, CANCEL_TASK)
    (gold_cancel,) = [a.model_dump() for a in cancel.reference_actions]
    reservation = gold_cancel["arguments"]["reservation_id"]
    look = {"name": "get_reservation_details", "arguments": {"reservation_id": reservation}}
    on_cancel = ("--scenario", CANCEL_TASK)

    def play(case: str, actions: list[Any], *args: str) -> dict[str, Any]:
        return scripted_episode(airline_library, tmp_path, server, case, actions, "Cancelled.", *on_cancel, *args)

    # Steps are upstream's: the user's opening (1), then 2 per tool turn (the call and its results): the fifth tool
    # turn reaches 11 >= 10, and the episode ends there with the gold database but reward 0.
    steps = play("step-limit", [gold_cancel] + [look] * 20, "--max-steps", "10")
    assert steps["termination"] == "max_steps"
    assert len(steps["steps"]) == 5
    assert (steps["reward"]["state_reward"], steps["reward"]["success"], steps["check_results"]) == (0.0, False, [])
    assert any(step["call"]["name"] == "cancel_reservation" for step in steps["steps"])

    # Ten failed calls in all (not in a row: a good call in between does not reset the count) end the episode.
    bad = [
        {"name": "get_reservation_details", "arguments": {"reservation_id": "NOPE00"}},
        {"name": "no_such_tool", "arguments": {}},
        {"name": "get_reservation_details", "arguments": {"reservation": reservation}},
    ]
    failing = [gold_cancel, *bad, look, *bad, *bad, bad[0], look, look]
    errors = play("error-limit", failing)
    assert errors["termination"] == "too_many_errors"
    assert len(errors["steps"]) == 12  # the gold, 3 + 1 good + 3 + 3 + 1 failed: the tenth failure ends it
    assert errors["reward"]["state_reward"] == 0.0 and errors["check_results"] == []
    tool_texts = [m["content"] for m in errors["messages"] if m["role"] == "tool"]
    # Tool results reach the agent as upstream's environment writes them, not re-encoded.
    assert "Error: Reservation NOPE00 not found" in tool_texts
    assert "Error: Tool 'no_such_tool' not found." in tool_texts

    # Arguments that are not JSON: upstream's agent cannot produce the message and the simulation ends without a
    # stop (agent_error), reward 0.
    broken = play("broken-arguments", [gold_cancel, {"name": "get_reservation_details", "arguments": '{"id": '}])
    assert broken["termination"] == "agent_error"
    assert broken["reward"]["state_reward"] == 0.0 and broken["check_results"] == []


def test_a_limit_reached_by_the_users_stop_replaces_it(
    airline_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    # The oracle's episode: the user's opening (1), the cancel and its result (3), the reply (4), the stop (5).
    finished = run_tau2(airline_library, tmp_path / "five", server, "--scenario", CANCEL_TASK, "--max-steps", "5")
    assert finished.code == 0, finished.stderr
    (cut,) = results(tmp_path / "five")
    assert cut["messages"][-1]["content"] == "###STOP###"
    assert (cut["termination"], cut["reward"]["state_reward"]) == ("max_steps", 0.0)
    finished = run_tau2(airline_library, tmp_path / "six", server, "--scenario", CANCEL_TASK, "--max-steps", "6")
    assert finished.code == 0, finished.stderr
    (whole,) = results(tmp_path / "six")
    assert (whole["termination"], whole["reward"]["state_reward"]) == ("user_stop", 1.0)


def test_tau2_rules_are_refused_off_a_tau2_library_and_outside_a_conversation(
    airline_library: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    seed = harness(["run", "--rules", "tau2", "--mode", "conv", "--agent", "oracle", "--limit", "1"])
    assert seed.code == 2 and len(seed.stderr_lines) == 1, seed.stderr
    assert "--rules tau2 runs only environments imported with `harness import tau2`" in seed.stderr
    nonconv = harness(
        ["run", "--rules", "tau2", "--mode", "nonconv", "--agent", "oracle", "--envs", str(airline_library)]
    )
    assert nonconv.code == 2 and len(nonconv.stderr_lines) == 1, nonconv.stderr
    assert "--rules tau2 runs conversations only: use --mode conv (not nonconv)" in nonconv.stderr


def test_a_tau2_library_runs_as_upstream_scores_it_without_a_flag(
    airline_library: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The library's records name their benchmark, which recommends its rules and a conversation: no --rules and
    no --mode run it as upstream scores it, and the header says where each came from; --rules tau2 alone runs the
    same conversation (the mode from the library), and the project's rules, asked for, the project's default mode."""
    oracle = ["--agent", "oracle", "--user-model", "oracle-user", "--scenario", CANCEL_TASK]
    plain = harness(["run", "--envs", str(airline_library), "--out", str(tmp_path / "plain"), *oracle])
    assert plain.code == 0, plain.stderr
    header = " ".join(plain.stdout.split())
    assert "modes conv (from the library)" in header and "rules tau2 (from the library)" in header
    assert "step limit 200 messages (tau2's default)" in header
    config = orjson.loads((tmp_path / "plain" / "manifest.json").read_bytes())["config"]
    assert (config["rules"], config["mode"]) == ("tau2", "conv")
    (episode,) = results(tmp_path / "plain")
    assert episode["messages"][1] == {"role": "assistant", "content": TAU2_AGENT_GREETING}
    assert (episode["termination"], episode["reward"]["state_reward"]) == ("user_stop", 1.0)

    asked = harness(
        ["run", "--envs", str(airline_library), "--out", str(tmp_path / "asked"), "--rules", "tau2", *oracle]
    )
    assert asked.code == 0, asked.stderr
    header = " ".join(asked.stdout.split())
    assert "modes conv (from the library)" in header and "rules tau2 ·" in header
    # The same settings make the same episodes: the same ids, the same results.
    assert [r["episode_id"] for r in results(tmp_path / "asked")] == [episode["episode_id"]]

    mine = harness(
        ["run", "--envs", str(airline_library), "--out", str(tmp_path / "mine"), "--rules", "harness", *oracle]
    )
    assert mine.code == 0, mine.stderr
    config = orjson.loads((tmp_path / "mine" / "manifest.json").read_bytes())["config"]
    assert (config["rules"], config["mode"]) == ("harness", "nonconv")
    assert "step limit default (30 nonconv, 40 conv)" in " ".join(mine.stdout.split())
    assert "(from the library)" not in mine.stdout


def test_the_profile_counts_as_upstream() -> None:
    assert EpisodeConfig(rules="tau2", mode="conv").step_limit == 200
    assert EpisodeConfig(mode="conv").step_limit == 40
    limits = MessageLimits(TAU2_RULES, step_limit=7)
    failed = Observation(tool_call_id="c", name="t", kind=ObservationKind.OK, content="Error: no")
    fine = Observation(tool_call_id="c", name="t", kind=ObservationKind.OK, content='{"a": 1}')
    for _ in range(9):
        limits.record_tool_result(failed)
    limits.record_tool_result(fine)
    assert limits.count(3) is None  # 9 errors, 3 steps
    limits.record_tool_result(failed)
    reached = limits.count(4)  # 10 errors and 7 steps together: upstream sets the error ending last
    assert reached is not None and reached[0] is TerminationReason.TOO_MANY_ERRORS
    timeout = Observation(tool_call_id="c", name="t", kind=ObservationKind.TIMEOUT, error="took too long")
    assert observation_content(timeout, TAU2_RULES) == "Error: took too long"
    assert observation_content(fine, TAU2_RULES) == '{"a": 1}'


def upstream_pass_hat_k(wheel: Path) -> Any:
    """Upstream's ``pass_hat_k`` (tau2/metrics/agent_metrics.py), compiled from the wheel's text."""
    with zipfile.ZipFile(wheel) as archive:
        tree = ast.parse(archive.read("tau2/metrics/agent_metrics.py").decode())
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "pass_hat_k")
    namespace: dict[str, Any] = {"math": math}
    exec(compile(ast.Module(body=[function], type_ignores=[]), "agent_metrics.py", "exec"), namespace)
    return namespace["pass_hat_k"]


def test_pass_hat_k_of_a_run_is_upstreams_per_task_estimate_averaged(tau2_wheel: Path) -> None:  # noqa: F811
    upstream = upstream_pass_hat_k(tau2_wheel)
    # Four trials of three tasks: 3, 0 and 4 successes.
    outcomes = {"a": [True, True, False, True], "b": [False] * 4, "c": [True] * 4}
    trajectories = [
        make_trajectory(
            f"{task}-{trial}",
            scenario_id=task,
            mode="conv",
            trial=trial,
            state_reward=1.0 if success else 0.0,
            termination=TerminationReason.USER_STOP,
        )
        for task, results_of_task in outcomes.items()
        for trial, success in enumerate(results_of_task)
    ]
    curve = pass_hat_k_curve(trajectories)
    expected = {
        k: math.fsum(upstream(len(r), sum(r), k) for r in outcomes.values()) / len(outcomes) for k in range(1, 5)
    }
    assert curve == pytest.approx(expected)
    assert curve[2] == pytest.approx((3 / 6 + 0 + 1) / 3)  # C(3,2)/C(4,2) for task a
