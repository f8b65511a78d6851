"""`--rules taubench` on the made-up τ-bench domain, through the real CLI, the real jail and the mock OpenAI server:
the oracle scores every task 1.0; scripted agents that make each kind of mistake get upstream's reward
(``tau_bench/envs/base.py`` ``calculate_reward``); the agent and the user see what upstream's tool-calling agent
and user simulator see; the ReAct preset sends only the user's reply; the rules are refused where they cannot
apply; the export is upstream's results format, and upstream's pass^k of it is ours. Every export is also replayed
by ``tests/support/taubench_scorer.py`` (upstream's ending and reward rules over the checkout's own tools, data and
tasks, independent of the harness's checks): the oracle's and each scripted run's rewards are the scorer's."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.benchmarks.taubench.export import env_run_results, upstream_pass_hat_k
from harness.library import load_library
from harness.results.metrics import load_run
from harness.results.tally import pass_hat_k_curve
from tests.doubles.mock_openai import MockOpenAIServer, PolicyRequest, ReplayPolicy, SimulatedUserPolicy, make_tool_call
from tests.harness.benchmarks.test_taubench_import import shop_library, taubench_checkout  # noqa: F401  (fixtures)
from tests.support.cli_process import REPO, Finished, harness, harness_cli
from tests.support.taubench_checkout import DOMAIN, INSTRUCTIONS, WIKI, user_prompt
from tests.support.taubench_checkout import USER_OPENING as SIMULATOR_OPENING

USER_OPENING = "Hello, I would like to buy something."
BUY_TASK = "taubench-shop-test-0"  # gold: find_customer, buy_item (2 lamps for ann_7)
PRICE_TASK = "taubench-shop-test-1"  # gold: reads only; the user must be told 59.97
TRANSFER_TASK = "taubench-shop-test-2"  # gold: find_customer, transfer_to_human_agents
NOTHING_TASK = "taubench-shop-test-4"  # gold: no action (the right outcome changes nothing)
FIND: dict[str, Any] = {"name": "find_customer", "arguments": {"email": "ann@example.com"}}
BUY: dict[str, Any] = {"name": "buy_item", "arguments": {"customer_id": "ann_7", "item_id": "lamp", "quantity": 2}}
LOOK: dict[str, Any] = {"name": "get_item", "arguments": {"item_id": "lamp"}}


@dataclass
class TwoCallsPolicy:
    """One message with two tool calls (the first one the gold write), then a text reply."""

    first: dict[str, Any]
    second: dict[str, Any]

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        if any(m.get("role") == "tool" for m in request.messages):
            return {"role": "assistant", "content": "Done."}
        calls = [
            make_tool_call(f"call_{i}", c["name"], orjson.dumps(c["arguments"]).decode())
            for i, c in enumerate((self.first, self.second))
        ]
        return {"role": "assistant", "content": None, "tool_calls": calls}


@pytest.fixture(scope="module")
def server() -> Iterator[MockOpenAIServer]:
    mock = MockOpenAIServer()
    mock.set_policy("tb-user", SimulatedUserPolicy(turns=[USER_OPENING]))
    with mock.running_in_thread():
        yield mock


def run_taubench(
    library: Path, out: Path, server: MockOpenAIServer, *args: str, agent: str = "oracle", user: str = "tb-user"
) -> Finished:
    models = out.parent / f"{out.name}-models.toml"
    lines = []
    for alias, model in (("mock-agent", agent), ("mock-user", user)):
        lines += [f"[aliases.{alias}]", f'model = "hosted_vllm/{model}"', f'api_base = "{server.base_url}"']
    models.write_text("\n".join(lines) + "\n")
    command = ["run", "--envs", str(library), "--out", str(out), "--mode", "conv", "--concurrency", "2"]
    # No --include-invalid: a τ-bench task whose gold only reads passes its data check at reset, and is run all the
    # same, as upstream runs it (validation keeps a released benchmark's tasks, with a warning).
    command += ["--model", "mock-agent", "--user-model", "mock-user", *args]
    if "--rules" not in args:
        command += ["--rules", "taubench"]
    command += ["--agent", "oracle" if agent == "oracle" else "function_calling"]
    return harness(command, {"HARNESS_MODELS_FILE": str(models)})


def results(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]


def upstream_scores(checkout: Path, records: list[dict[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """Each exported record replayed as upstream ends and rewards a conversation (tests/support/taubench_scorer.py,
    in its own process: the checkout's tools are imported there, never here)."""
    exported = folder / "scored.json"
    exported.write_bytes(orjson.dumps(records))
    command = [sys.executable, str(REPO / "tests" / "support" / "taubench_scorer.py"), "--checkout", str(checkout)]
    command += ["--domain", DOMAIN, "--split", "test", "--results", str(exported)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    scored: list[dict[str, Any]] = orjson.loads(done.stdout)["records"]
    assert [(r["task_id"], r["trial"]) for r in scored] == [(r["task_id"], r["trial"]) for r in records]
    assert all(r["tool_mismatches"] == 0 for r in scored)  # upstream's tools answer as the jail did
    return scored


def test_the_oracle_scores_every_task_one_and_each_side_sees_upstreams_view(
    shop_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    out = tmp_path / "oracle"
    finished = run_taubench(shop_library, out, server)
    assert finished.code == 0, finished.stderr
    episodes = {e["scenario_id"]: e for e in results(out)}
    assert len(episodes) == 5
    assert all(e["reward"]["state_reward"] == 1.0 and e["reward"]["success"] for e in episodes.values())
    # The transfer ends the episode when it runs (upstream's terminate tool), and that ending is scored.
    assert episodes[TRANSFER_TASK]["termination"] == "agent_done"
    assert {e["termination"] for s, e in episodes.items() if s != TRANSFER_TASK} == {"user_stop"}
    for episode in episodes.values():
        # The agent: the wiki as the whole system prompt, then the user's first message (no greeting).
        system, opening = episode["messages"][:2]
        assert system == {"role": "system", "content": WIKI}
        assert opening == {"role": "user", "content": USER_OPENING}
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["config"]["rules"] == "taubench"
    user_requests = [r.body for r in server.chat_requests("tb-user") if r.body]
    assert user_requests
    for body in user_requests:
        messages = body["messages"]
        # Upstream's build_system_prompt, read from the checkout's syntax tree, for one of the tasks' instructions.
        assert messages[0]["role"] == "system"
        assert messages[0]["content"] in {user_prompt(t) for t in INSTRUCTIONS}
        assert messages[1] == {"role": "user", "content": SIMULATOR_OPENING}
        assert all(m["role"] in ("system", "user", "assistant") and not m.get("tool_calls") for m in messages)


def test_an_exported_oracle_run_scores_one_under_upstreams_rules_for_every_task(
    taubench_checkout: Path,  # noqa: F811
    shop_library: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    out = tmp_path / "oracle-user"
    command = ["run", "--envs", str(shop_library), "--out", str(out), "--mode", "conv", "--rules", "taubench"]
    finished = harness([*command, "--agent", "oracle", "--user-model", "oracle-user", "--concurrency", "2"])
    assert finished.code == 0, finished.stderr
    exported = tmp_path / "oracle.json"
    done = harness_cli("export", "taubench", str(out), "--out", str(exported))
    assert done.returncode == 0, done.stderr
    records = orjson.loads(exported.read_bytes())
    assert [r["task_id"] for r in records] == [0, 1, 2, 3, 4]
    scored = upstream_scores(taubench_checkout, records, tmp_path)
    assert [r["reward"] for r in records] == [1.0] * 5
    assert [r["reward"] for r in scored] == [1.0] * 5
    assert [r["ended"] for r in scored] == ["user_stop", "user_stop", "terminate_tool", "user_stop", "user_stop"]
    # The gold that changes nothing: the user asks, the agent answers, and only then does the user stop (upstream
    # never ends a conversation at the user's first message, so one that stopped there would score 0 upstream).
    nothing = [(m["role"], m["content"]) for m in records[4]["traj"][1:]]
    assert len(nothing) == 3 and nothing[0][0] == "user" and "###STOP###" not in nothing[0][1]
    assert nothing[1][0] == "assistant" and nothing[1][1] and nothing[2] == ("user", "###STOP###")


def play(
    library: Path,
    tmp_path: Path,
    server: MockOpenAIServer,
    case: str,
    policy: Any,
    scenario: str,
    *args: str,
    user: str = "tb-user",
) -> dict[str, Any]:
    server.set_policy(case, policy)
    finished = run_taubench(library, tmp_path / case, server, "--scenario", scenario, *args, agent=case, user=user)
    assert finished.code == 0, finished.stderr
    (episode,) = results(tmp_path / case)
    return episode


def outcome(episode: dict[str, Any]) -> tuple[str, float]:
    return episode["termination"], episode["reward"]["state_reward"]


def test_each_kind_of_mistake_gets_upstreams_reward(
    taubench_checkout: Path,  # noqa: F811
    shop_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    def scripted(
        case: str, actions: list[Any], reply: str, scenario: str = BUY_TASK, *args: str, user: str = "tb-user"
    ) -> dict[str, Any]:
        policy = ReplayPolicy(actions=actions, final_text=reply)
        return play(shop_library, tmp_path, server, case, policy, scenario, *args, user=user)

    assert outcome(scripted("right", [FIND, BUY], "Bought.")) == ("user_stop", 1.0)
    wrong = {"name": "buy_item", "arguments": {**BUY["arguments"], "quantity": 3}}
    assert outcome(scripted("wrong-argument", [FIND, wrong], "Bought.")) == ("user_stop", 0.0)
    assert outcome(scripted("missing-write", [FIND], "Bought.")) == ("user_stop", 0.0)
    # Reads change no data: an extra read, or a missing one, is not penalised (upstream compares data only).
    assert outcome(scripted("extra-read", [LOOK, FIND, LOOK, BUY], "Bought.")) == ("user_stop", 1.0)
    assert outcome(scripted("no-read", [BUY], "Bought.")) == ("user_stop", 1.0)
    # A tool error is an observation the agent goes on from; its text is upstream's env.step text, as is.
    errored = scripted("tool-error", [{"name": "get_item", "arguments": {"item_id": "sofa"}}, FIND, BUY], "Bought.")
    assert outcome(errored) == ("user_stop", 1.0)
    tool_texts = [m["content"] for m in errored["messages"] if m["role"] == "tool"]
    assert tool_texts[0] == "Error: 'sofa'"
    assert (
        tool_texts[2]
        == '{"email": "ann@example.com", "balance": 60.02, "orders": [{"item_id": "lamp", "quantity": 2, "paid": 39.98}]}'
    )
    unknown = scripted("unknown-tool", [{"name": "refund", "arguments": {}}, FIND, BUY], "Bought.")
    assert outcome(unknown) == ("user_stop", 1.0)
    assert next(m["content"] for m in unknown["messages"] if m["role"] == "tool") == "Unknown action refund"

    # Required outputs: in some reply to the user, in lower case, with the reply's commas removed.
    price_reads = [LOOK, {"name": "calculate", "arguments": {"expression": "3 * 19.99"}}]
    assert outcome(scripted("told", price_reads, "Three lamps cost 59.97 dollars.", PRICE_TASK)) == ("user_stop", 1.0)
    assert outcome(scripted("told-commas", [], "That is 5,9.97 in all.", PRICE_TASK)) == ("user_stop", 1.0)
    told_wrong = scripted("wrong-output", price_reads, "Three lamps cost 59.98 dollars.", PRICE_TASK)
    assert outcome(told_wrong) == ("user_stop", 0.0)
    assert told_wrong["reward"]["checks_passed"] == 1  # the data is right, the output is not: all or nothing
    assert outcome(scripted("no-output", price_reads, "Three lamps are affordable.", PRICE_TASK)) == ("user_stop", 0.0)

    # The step limit (30 agent steps upstream; 4 here) ends the episode without a reward, whatever the data.
    limited = scripted("step-limit", [FIND, BUY, LOOK, LOOK, LOOK, LOOK], "Bought.", BUY_TASK, "--max-steps", "4")
    assert outcome(limited) == ("max_steps", 0.0)
    assert len(limited["steps"]) == 4 and limited["check_results"] == []

    # The transfer tool runs and ends the episode, scored: with the gold data that is 1.0 (reads are free) ...
    transfer = {"name": "transfer_to_human_agents", "arguments": {"summary": "Broken rug."}}
    moved = scripted("transfer", [transfer, LOOK], "Hello?", TRANSFER_TASK)
    assert outcome(moved) == ("agent_done", 1.0)
    assert len(moved["steps"]) == 1
    # ... and before the write it is 0.
    assert outcome(scripted("early-transfer", [FIND, transfer, BUY], "Bought.")) == ("agent_done", 0.0)

    # Only the first call of a message runs, and the message keeps only that call (upstream's tool-calling agent).
    both = play(shop_library, tmp_path, server, "two-calls", TwoCallsPolicy(FIND, BUY), BUY_TASK)
    assert outcome(both) == ("user_stop", 0.0)
    assert [s["call"]["name"] for s in both["steps"]] == ["find_customer"]
    (with_calls,) = [m for m in both["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert [c["function"]["name"] for c in with_calls["tool_calls"]] == ["find_customer"]

    # Arguments that are not JSON: upstream's agent raises and the task scores 0.
    broken = scripted("broken-arguments", [FIND, {"name": "buy_item", "arguments": '{"customer_id": '}], "Bought.")
    assert outcome(broken) == ("agent_error", 0.0)

    # A user whose first message already holds ###STOP###: upstream's reset does not look, so the agent acts and
    # only the user's answer to its reply ends the conversation.
    server.set_policy("tb-stop-user", SimulatedUserPolicy(turns=[]))
    opened = scripted("opening-stop", [FIND, BUY], "Bought.", user="tb-stop-user")
    assert outcome(opened) == ("user_stop", 1.0)
    assert [m["content"] for m in opened["messages"] if m["role"] == "user"] == ["###STOP###", "###STOP###"]
    # ###STOP### anywhere in the user's message stops, whatever other profile's token comes before it.
    server.set_policy("tb-late-stop", SimulatedUserPolicy(turns=[USER_OPENING], stop_token="###TRANSFER### ###STOP###"))
    assert outcome(scripted("late-stop-token", [FIND, BUY], "Bought.", user="tb-late-stop")) == ("user_stop", 1.0)
    # The gold that changes nothing: reads are free, any write fails it.
    assert outcome(scripted("nothing-right", [FIND], "Nothing to refund.", NOTHING_TASK)) == ("user_stop", 1.0)
    assert outcome(scripted("nothing-wrong", [FIND, BUY], "Refunded as a lamp.", NOTHING_TASK)) == ("user_stop", 0.0)

    # Every run exported and replayed as upstream ends and rewards it: the same reward, case by case.
    scenarios = {scenario.id: scenario for scenario in load_library(shop_library).scenarios}
    cases = sorted(folder.name for folder in tmp_path.iterdir() if (folder / "results.jsonl").is_file())
    assert len(cases) == 20
    records = [record for case in cases for record in env_run_results(load_run(tmp_path / case)[1], scenarios)]
    assert len(records) == len(cases)
    scored = upstream_scores(taubench_checkout, records, tmp_path)
    ours = {case: record["reward"] for case, record in zip(cases, records, strict=True)}
    assert {case: result["reward"] for case, result in zip(cases, scored, strict=True)} == ours
    ended = {case: result["ended"] for case, result in zip(cases, scored, strict=True)}
    assert (ended["step-limit"], ended["broken-arguments"], ended["transfer"]) == (
        "transcript_ends",
        "agent_error",
        "terminate_tool",
    )


def test_the_react_preset_sends_only_the_users_reply(
    shop_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    thought = "Thought:\nI should ask for two lamps.\n\nUser Response:\nI want two lamps, please."
    server.set_policy("tb-react-user", SimulatedUserPolicy(turns=[thought]))
    server.set_policy("react-agent", ReplayPolicy(actions=[FIND, BUY], final_text="Bought."))
    out = tmp_path / "react"
    args = ("--rules", "taubench-react", "--scenario", BUY_TASK, "--temperature", "0.7")
    finished = run_taubench(shop_library, out, server, *args, agent="react-agent", user="tb-react-user")
    assert finished.code == 0, finished.stderr
    (episode,) = results(out)
    assert outcome(episode) == ("user_stop", 1.0)
    user_messages = [m["content"] for m in episode["messages"] if m["role"] == "user"]
    assert user_messages == ["I want two lamps, please.", "###STOP###"]
    bodies = [r.body for r in server.chat_requests("tb-react-user") if r.body]
    assert "User Response:" in bodies[0]["messages"][0]["content"]
    assert all(body.get("temperature") == 0.7 for body in bodies)
    # The user's own history keeps its thought.
    assert any(m.get("content") == thought for m in bodies[-1]["messages"] if m["role"] == "assistant")
    assert orjson.loads((out / "manifest.json").read_bytes())["config"]["rules"] == "taubench-react"


def test_the_rules_are_refused_off_taubench_imports_and_outside_conversations(
    shop_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    nonconv = run_taubench(shop_library, tmp_path / "nonconv", server, "--mode", "nonconv")
    assert nonconv.code != 0 and "--rules taubench runs conversations only" in nonconv.stderr
    library = tmp_path / "handwritten"
    library.mkdir()
    from harness.library import load_library, write_seed_layout

    imported = load_library(shop_library)
    environment = next(iter(imported.environments.values()))
    foreign = environment.model_copy(update={"provenance": environment.provenance.model_copy(update={"source": "x"})})
    write_seed_layout([foreign], imported.scenarios[:1], library / "lib")
    refused = run_taubench(library / "lib", tmp_path / "foreign", server)
    assert refused.code != 0
    assert "runs only environments imported with `harness import taubench`" in refused.stderr
    assert "Traceback" not in refused.stderr + nonconv.stderr


def test_the_export_is_upstreams_results_file_and_round_trips(
    shop_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    # Three trials of an agent that buys for ann_7 every time: 1.0 on the buy task, 0 on the others.
    server.set_policy("buyer", ReplayPolicy(actions=[FIND, BUY], final_text="Bought."))
    out = tmp_path / "trials"
    finished = run_taubench(shop_library, out, server, "--trials", "3", agent="buyer")
    assert finished.code == 0, finished.stderr
    exported = tmp_path / "upstream.json"
    from tests.support.cli_process import harness_cli

    done = harness_cli("export", "taubench", str(out), "--out", str(exported))
    assert done.returncode == 0, done.stderr
    records = orjson.loads(exported.read_bytes())
    assert isinstance(records, list) and len(records) == 15
    for record in records:
        # upstream's EnvRunResult (tau_bench/types.py): exactly these fields, with these types
        assert set(record) == {"task_id", "reward", "info", "traj", "trial"}
        assert isinstance(record["task_id"], int) and isinstance(record["reward"], float)
        assert (
            isinstance(record["info"], dict) and isinstance(record["traj"], list) and isinstance(record["trial"], int)
        )
        assert record["info"]["task"]["instruction"]
    ours = {(t.scenario_id, t.trial): t.reward.state_reward for t in load_run(out)[1] if t.reward is not None}
    theirs = {(f"taubench-shop-test-{r['task_id']}", r["trial"]): r["reward"] for r in records}
    assert theirs == ours
    assert {r["task_id"]: r["reward"] for r in records} == {0: 1.0, 1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}
    by_task = [r for r in records if r["task_id"] == 1]
    assert by_task[0]["info"]["reward_info"]["info"] == {"r_outputs": 0.0, "outputs": {"59.97": False}}
    assert upstream_pass_hat_k(records) == pytest.approx(pass_hat_k_curve(load_run(out)[1]))
    assert upstream_pass_hat_k(records) == pytest.approx({1: 0.2, 2: 0.2, 3: 0.2})
