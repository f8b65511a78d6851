"""`--rules acebench` on libraries imported from the made-up checkout, through the real CLI and the real jail: the
oracle scores every solvable task 1.0; scripted agents (the mock OpenAI server) making each kind of mistake get
ACEBench's end-to-end reward and process accuracy; tool results and errors read as upstream's execution writes
them; the simulated user sees upstream's view; the rules are refused off an ACEBench library."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.doubles.mock_openai import MockOpenAIServer, ReplayPolicy, SimulatedUserPolicy
from tests.harness.benchmarks.test_acebench_import import (  # noqa: F401  (fixtures)
    acebench_checkout,
    multi_step_library,
    multi_turn_library,
)
from tests.support.acebench_checkout import MULTI_TURN, USER_OPENINGS, USER_PROMPTS
from tests.support.cli_process import Finished, harness

USER_LINE = "Hi, I need help with my notes."
TURN_ERROR = str(list("Error during execution: {str(e)}"))
"""What upstream's multi_turn execution shows for any raising call (its message is not formatted)."""


@pytest.fixture(scope="module")
def server() -> Iterator[MockOpenAIServer]:
    mock = MockOpenAIServer()
    mock.set_policy("acebench-user", SimulatedUserPolicy(turns=[USER_LINE], stop_token="finish conversation"))
    with mock.running_in_thread():
        yield mock


def run_acebench(library: Path, out: Path, server: MockOpenAIServer, *args: str, agent: str = "oracle") -> Finished:
    models = out.parent / f"{out.name}-models.toml"
    lines = []
    for alias, model in (("mock-agent", agent), ("mock-user", "acebench-user")):
        lines += [f"[aliases.{alias}]", f'model = "hosted_vllm/{model}"', f'api_base = "{server.base_url}"']
    models.write_text("\n".join(lines) + "\n")
    command = ["run", "--envs", str(library), "--out", str(out), "--model", "mock-agent", "--concurrency", "2"]
    command += ["--agent", "oracle" if agent == "oracle" else "function_calling", *args]
    if "--rules" not in args:
        command += ["--rules", "acebench"]
    return harness(command, {"HARNESS_MODELS_FILE": str(models)})


def results(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]


def play(
    library: Path, tmp_path: Path, server: MockOpenAIServer, case: str, actions: list[Any], task: str, *args: str
) -> dict[str, Any]:
    """One episode of ``task`` by a model that makes ``actions`` (one per turn), then says it is done."""
    server.set_policy(case, ReplayPolicy(actions=actions, final_text="Task Completed"))
    finished = run_acebench(library, tmp_path / case, server, "--scenario", task, *args, agent=case)
    assert finished.code == 0, finished.stderr
    (episode,) = results(tmp_path / case)
    return episode


def score(episode: dict[str, Any]) -> tuple[float, float]:
    return episode["reward"]["state_reward"], episode["reward"]["process_accuracy"]


def add(text: str) -> dict[str, Any]:
    return {"name": "add_note", "arguments": {"title": "shopping", "text": text}}


WIFI = {"name": "turn_on_wifi", "arguments": {}}
LIST = {"name": "list_notes", "arguments": {}}


def test_the_oracle_scores_every_solvable_task_one(
    multi_step_library: Path,  # noqa: F811
    multi_turn_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    steps = run_acebench(multi_step_library, tmp_path / "steps", server)
    assert steps.code == 0, steps.stderr
    assert sorted((e["scenario_id"], score(e)) for e in results(tmp_path / "steps")) == [
        ("acebench-multi-step-en-0", (1.0, 1.0)),
        ("acebench-multi-step-en-1", (1.0, 1.0)),
        ("acebench-multi-step-en-2", (1.0, 1.0)),
    ]
    out = tmp_path / "turns"
    turns = run_acebench(multi_turn_library, out, server, "--mode", "conv", "--user-model", "mock-user")
    assert turns.code == 0, turns.stderr
    episodes = {e["scenario_id"]: e for e in results(out)}
    assert {e["termination"] for e in episodes.values()} == {"user_stop"}
    assert score(episodes["acebench-multi-turn-en-0"]) == (1.0, 1.0)
    assert score(episodes["acebench-multi-turn-en-1"]) == (1.0, 1.0)
    # The task whose gold misses upstream's own ground truth scores 0 (its process is the gold's: found in full).
    assert score(episodes["acebench-multi-turn-en-3"]) == (0.0, 1.0)
    for episode in episodes.values():
        system, opening = episode["messages"][:2]
        assert system["content"].startswith("You are an AI system") and "You run a phone." in system["content"]
        assert 'say "finish conversation"' in system["content"]
        assert opening == {"role": "user", "content": USER_LINE}  # the agent does not see the user's cue
    user_requests = [r.body for r in server.chat_requests("acebench-user") if r.body]
    assert user_requests
    for body in user_requests:
        messages = body["messages"]
        # Upstream's APIUSER prompt (BaseApi's, English) for one of the tasks, its opening line, then its own lines
        # as "system" messages and the agent's as "user" ones.
        prompts = {USER_PROMPTS[("BaseApi", "en")].format(instruction=question) for question, *_ in MULTI_TURN}
        assert messages[0]["role"] == "system" and messages[0]["content"] in prompts
        assert messages[1] == {"role": "user", "content": USER_OPENINGS["en"]}
        assert [m["role"] for m in messages[2:]] == ["system", "user"] * ((len(messages) - 2) // 2)
        assert not any(m.get("tool_calls") for m in messages)
    assert orjson.loads((out / "manifest.json").read_bytes())["config"]["rules"] == "acebench"


def test_each_mistake_scores_what_acebench_gives(
    multi_step_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    library = multi_step_library
    task0, task1, task2 = (f"acebench-multi-step-en-{n}" for n in range(3))
    assert score(play(library, tmp_path, server, "right", [add("Buy milk")], task0)) == (1.0, 1.0)
    wrong = play(library, tmp_path, server, "wrong-argument", [add("Buy bread")], task0)
    assert (wrong["termination"], *score(wrong)) == ("agent_done", 0.0, 0.0)
    # Missing write: the best alternative of the milestones ([wifi, add] or [add x]) is half found.
    assert score(play(library, tmp_path, server, "missing-write", [WIFI], task1)) == (0.0, 0.5)
    # An extra read costs nothing upstream: end-to-end compares the state, and 1.0 end-to-end is 1.0 process.
    extra = play(library, tmp_path, server, "extra-read", [LIST, add("Buy milk")], task0)
    assert score(extra) == (1.0, 1.0)
    assert extra["messages"][3]["content"] == "[\"['old']\"]"  # str() of a list, kept as text after json.loads
    # The step limit counts messages (upstream's 40 by default): cut after the wifi, the state is still scored.
    cut = play(library, tmp_path, server, "step-limit", [WIFI, add("Buy milk")], task1, "--max-steps", "2")
    assert (cut["termination"], *score(cut)) == ("max_steps", 0.0, 0.5)
    # A raising call: multi_step shows the formatted error and goes on.
    bad = {"name": "delete_note", "arguments": {"note_id": 99}}
    good = {"name": "delete_note", "arguments": {"note_id": 1}}
    error = play(library, tmp_path, server, "tool-error", [bad, good], task2)
    assert error["messages"][3]["content"] == "['Error during execution: 99']"
    assert score(error) == (1.0, 1.0)
    # Upstream compares only the ground truth's keys of a dict attribute: an empty expected inbox of notes holds
    # whatever is left, once any call was executed; with no call at all there is no result to compare.
    assert score(play(library, tmp_path, server, "only-error", [bad], task2)) == (1.0, 1.0)
    assert score(play(library, tmp_path, server, "nothing", [], task2)) == (0.0, 0.0)


def test_multi_turn_errors_read_as_upstreams_and_the_paper_preset_ends_on_task_completed(
    multi_turn_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    conv = ("--mode", "conv", "--user-model", "mock-user")
    bad = {"name": "delete_note", "arguments": {"note_id": 99}}
    good = {"name": "delete_note", "arguments": {"note_id": 1}}
    task = "acebench-multi-turn-en-1"
    error = play(multi_turn_library, tmp_path, server, "turn-error", [bad, good], task, *conv)
    assert error["messages"][3]["content"] == TURN_ERROR
    assert (error["termination"], *score(error)) == ("user_stop", 1.0, 1.0)
    # Under multi_turn a message that raised records no result: with no other call there is nothing to compare.
    only = play(multi_turn_library, tmp_path, server, "turn-only-error", [bad], task, *conv)
    assert score(only) == (0.0, 0.0)
    # acebench's own rules: "Task Completed" is only text to the user, who then ends the conversation.
    assert error["messages"][-1] == {"role": "user", "content": "finish conversation"}
    gold = [WIFI, add("Buy milk")]
    paper = play(
        multi_turn_library,
        tmp_path,
        server,
        "paper",
        gold,
        "acebench-multi-turn-en-0",
        *conv,
        "--rules",
        "acebench-envscaler",
    )
    assert (paper["termination"], *score(paper)) == ("agent_done", 1.0, 1.0)
    assert paper["messages"][-1] == {"role": "assistant", "content": "Task Completed"}
    assert 'say "Task Completed"' in paper["messages"][0]["content"]


def test_acebench_rules_are_refused_off_an_acebench_library() -> None:
    seed = harness(["run", "--rules", "acebench", "--agent", "oracle", "--limit", "1"])
    assert seed.code == 2 and len(seed.stderr_lines) == 1, seed.stderr
    assert "--rules acebench runs only environments imported with `harness import acebench`" in seed.stderr
