"""τ²-bench's telecom domain imported from the real wheel: dual control (the user's own tools and phone state in the
same jailed environment), every base-split gold proved against upstream's environment assertions at import, the
oracle and its user scoring every task 1.0 under ``--rules tau2``, and each reward factor failing on its own."""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.oracle import OracleAgent
from agents.oracle_user import OracleUser
from harness.episode.config import EpisodeConfig
from harness.episode.loop import run_episode
from harness.library import load_library
from harness.rules.protocols import STOP, UserTurn
from harness.sandbox import JailSpec, SandboxPool
from harness.schema import Environment, Scenario, Trajectory
from harness.scoring.checks import prepared_checks
from tests.doubles.mock_openai import MockOpenAIServer, ReplayPolicy
from tests.harness.benchmarks.test_tau2_import import tau2_wheel, wheel_json  # noqa: F401  (fixture)
from tests.support.cli_process import harness, harness_cli

SKIP_TRANSFER = "contract_end_suspension"  # ACTION basis: the agent must call transfer_to_human_agents
DUAL_TASK = "[mobile_data_issue]data_usage_exceeded|user_abroad_roaming_enabled_off[PERSONA:Easy]"
"""Gold: the agent refuels data, then the user turns data roaming on (the user is abroad)."""
BROKEN_AT_START = 94  # the 20 others are the ACTION tasks: a transfer, the phone left as it is


def upstream_tools(wheel: Path, module: str, toolkit: str) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        tree = ast.parse(archive.read(f"tau2/domains/telecom/{module}").decode())
    owner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == toolkit)
    return [
        node.name
        for node in owner.body
        if isinstance(node, ast.FunctionDef)
        and any(isinstance(d, ast.Call) and getattr(d.func, "id", "") == "is_tool" for d in node.decorator_list)
    ]


@pytest.fixture(scope="module")
def telecom_library(tau2_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("tau2") / "telecom"
    result = harness_cli("import", "tau2", "--source", str(tau2_wheel), "--domain", "telecom", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "114 tasks" in result.stdout
    return out


@pytest.fixture(scope="module")
def oracle_run(telecom_library: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("tau2-run") / "oracle"
    command = ["run", "--envs", str(telecom_library), "--out", str(out), "--rules", "tau2", "--mode", "conv"]
    command += ["--agent", "oracle", "--user-model", "oracle-user", "--concurrency", "2"]
    result = harness_cli(*command)
    assert result.returncode == 0, result.stderr
    return [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]


def test_the_import_holds_both_toolkits_both_states_and_every_base_task(
    tau2_wheel: Path,  # noqa: F811
    telecom_library: Path,
) -> None:
    library = load_library(telecom_library)
    (environment,) = library.environments.values()
    splits = wheel_json(tau2_wheel, "tau2/data/tau2/domains/telecom/split_tasks.json")
    assert isinstance(splits, dict)
    assert sorted(s.provenance.upstream_id for s in library.scenarios) == sorted(splits["base"])
    assert environment.tool_names == upstream_tools(tau2_wheel, "tools.py", "TelecomTools")
    user_tools = [t.function.name for t in environment.user_tools]
    assert user_tools == upstream_tools(tau2_wheel, "user_tools.py", "TelecomUserTools")
    assert not set(user_tools) & set(environment.tool_names)
    for scenario in library.scenarios:
        basis = scenario.provenance.details["reward_basis"]
        assert isinstance(basis, list)
        ids = [c.id for c in scenario.checks]
        assert ("tau2-env-assertions" in ids) == ("ENV_ASSERTION" in basis)
        assert any(i.startswith("tau2-action-") for i in ids) == ("ACTION" in basis)
        assert "tau2-db" not in ids  # no base task counts the DB
        gold = scenario.provenance.details["gold_actions"]
        assert isinstance(gold, list)
        assert len(scenario.reference_actions) + len(scenario.user_reference_actions) == len(gold)
        sides = {a.get("env_type") for a in scenario.initial_state["initialization_actions"]}  # type: ignore[union-attr]
        assert "user" in sides
    assert sum(1 for s in library.scenarios if "ACTION" in s.provenance.details["reward_basis"]) == 20  # type: ignore[operator]


async def test_every_gold_reaches_upstreams_expected_state(telecom_library: Path) -> None:
    """The import has already replayed each gold and run its checks on the state it reaches (the CLI writes nothing
    otherwise); here the environment assertions are run again in the check process: they hold on each gold's end
    state, and on the initial state they fail except where the task's fix is a transfer (a locked SIM, a contract
    that ended: the phone stays as it is)."""
    library = load_library(telecom_library)
    (environment,) = library.environments.values()
    held, broken_at_start = 0, 0
    async with JailSpec(workers=2).pool() as pool:
        for scenario in library.scenarios:
            start = await _state_after(pool, environment, scenario, gold=False)
            end = await _state_after(pool, environment, scenario, gold=True)
            assertions = [c for c in scenario.checks if c.id == "tau2-env-assertions"]
            (at_start,) = await pool.run_checks(prepared_checks(assertions), start, start, transcript=[])
            (at_end,) = await pool.run_checks(prepared_checks(assertions), start, end, transcript=[])
            assert at_end.passed, (scenario.id, at_end)
            held += 1
            broken_at_start += not at_start.passed
            if at_start.passed:
                assert "ACTION" in scenario.provenance.details["reward_basis"], scenario.id  # type: ignore[operator]
    assert held == 114
    assert broken_at_start == BROKEN_AT_START


async def _state_after(pool: SandboxPool, environment: Environment, scenario: Scenario, *, gold: bool) -> Any:
    from harness.benchmarks.tau2.telecom import replay_telecom_gold

    actions = scenario.provenance.details["gold_actions"] if gold else []
    assert isinstance(actions, list)
    state, _ = await replay_telecom_gold(pool, environment, scenario, actions)
    return state


def test_the_oracle_and_its_user_score_every_telecom_task_one(oracle_run: list[dict[str, Any]]) -> None:
    assert len(oracle_run) == 114
    assert {e["termination"] for e in oracle_run} == {"user_stop"}
    assert all(e["reward"]["success"] and e["reward"]["state_reward"] == 1.0 for e in oracle_run)
    assert sum(len(e.get("user_steps", [])) for e in oracle_run) == 393  # every user gold action, played by the user


def test_the_agent_never_sees_the_users_calls(telecom_library: Path, oracle_run: list[dict[str, Any]]) -> None:
    (environment,) = load_library(telecom_library).environments.values()
    user_tools = {t.function.name for t in environment.user_tools}
    for episode in oracle_run:
        assert not user_tools & {t["function"]["name"] for t in episode["tools"]}
        agent_calls = {c["id"] for m in episode["messages"] for c in m.get("tool_calls") or []}
        for message in episode["messages"]:
            assert not user_tools & {c["function"]["name"] for c in message.get("tool_calls") or []}
            if message["role"] == "tool":
                assert message["tool_call_id"] in agent_calls
            assert message["role"] != "user" or not message.get("tool_calls")
        assert {s["call"]["id"] for s in episode.get("user_steps", [])}.isdisjoint(agent_calls)


class RecordingUser(OracleUser):
    """The oracle's user, keeping every view it was given."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(scenario)
        self.views: list[list[dict[str, Any]]] = []

    async def respond_with_tools(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> UserTurn:
        self.views.append([dict(m) for m in messages])
        return await super().respond_with_tools(messages, tools)


def by_name(library: Path, fragment: str, *, basis: str) -> tuple[Scenario, Environment]:
    loaded = load_library(library)
    (environment,) = loaded.environments.values()
    for scenario in loaded.scenarios:
        bases = scenario.provenance.details["reward_basis"]
        if fragment in scenario.id and isinstance(bases, list) and basis in bases:
            return scenario, environment
    raise AssertionError(f"no task with {fragment!r} and {basis}")


async def episode(scenario: Scenario, played: Scenario, environment: Environment, user: OracleUser) -> Trajectory:
    async with JailSpec(workers=1).pool() as pool:
        return await run_episode(
            scenario,
            environment,
            pool=pool,
            agent=OracleAgent(played),
            user=user,
            config=EpisodeConfig(mode="conv", rules="tau2"),
            episode_id=f"{scenario.id}-test",
        )


@pytest.fixture
def transfer_task(telecom_library: Path) -> Iterator[tuple[Scenario, Environment]]:
    yield by_name(telecom_library, SKIP_TRANSFER, basis="ACTION")


async def test_an_agent_that_skips_a_required_action_gets_zero_through_action(
    transfer_task: tuple[Scenario, Environment],
) -> None:
    scenario, environment = transfer_task
    kept = [a for a in scenario.reference_actions if a.name != "transfer_to_human_agents"]
    assert len(kept) < len(scenario.reference_actions)
    trajectory = await episode(
        scenario, scenario.model_copy(update={"reference_actions": kept}), environment, OracleUser(scenario)
    )
    assert trajectory.reward is not None and trajectory.reward.state_reward == 0.0
    failed = {r.check_id for r in trajectory.check_results if not r.passed}
    passed = {r.check_id for r in trajectory.check_results if r.passed}
    assert "tau2-env-assertions" in passed  # the phone was fixed: only the missing action fails
    assert failed and all(check.startswith("tau2-action-") for check in failed)


async def test_a_phone_left_broken_gets_zero_through_env_assertion(telecom_library: Path) -> None:
    loaded = load_library(telecom_library)
    (environment,) = loaded.environments.values()
    scenario = next(s for s in loaded.scenarios if s.provenance.upstream_id == DUAL_TASK)
    assert [a.name for a in scenario.reference_actions] == ["refuel_data"]
    assert [a.name for a in scenario.user_reference_actions] == ["toggle_roaming"]
    played = scenario.model_copy(update={"user_reference_actions": []})
    user = RecordingUser(played)
    trajectory = await episode(scenario, played, environment, user)
    assert trajectory.termination.value == "user_stop"
    assert [step.call.name for step in trajectory.steps] == ["refuel_data"]
    assert trajectory.reward is not None and trajectory.reward.state_reward == 0.0
    (result,) = trajectory.check_results
    assert result.check_id == "tau2-env-assertions" and not result.passed
    # The whole gold, both sides, scores 1; the user's view holds its own call and result, never the agent's.
    user = RecordingUser(scenario)
    trajectory = await episode(scenario, scenario, environment, user)
    assert trajectory.reward is not None and trajectory.reward.state_reward == 1.0
    assert [step.call.name for step in trajectory.user_steps] == ["toggle_roaming"]
    last_view = user.views[-1]
    calls = [c["function"]["name"] for m in last_view for c in m.get("tool_calls") or []]
    assert calls == ["toggle_roaming"]
    assert [m["role"] for m in last_view].count("tool") == 1
    refuelled = "Successfully added 2.0 GB"  # the agent's tool result: in its transcript, not in the user's view
    assert any(m["role"] == "tool" and refuelled in str(m["content"]) for m in trajectory.messages)
    assert not any(refuelled in str(m.get("content")) for m in last_view)


USER_ONLY_TASK = "[mobile_data_issue]airplane_mode_on|data_mode_off[PERSONA:None]"
"""Gold: the user turns airplane mode off and mobile data on; the agent has nothing to call."""


def test_a_model_user_calls_its_own_tools_through_the_cli(telecom_library: Path, tmp_path: Path) -> None:
    """The simulated user is a model (the mock server): it is sent the user's tools, its calls run on the phone,
    their results come back to it, and neither reaches the agent's transcript."""
    (environment,) = load_library(telecom_library).environments.values()
    with MockOpenAIServer().running_in_thread() as server:
        server.set_policy(
            "user", ReplayPolicy(actions=[{"name": "toggle_airplane_mode"}, {"name": "toggle_data"}], final_text=STOP)
        )
        models = tmp_path / "models.toml"
        models.write_text(f'[aliases.mock-user]\nmodel = "hosted_vllm/user"\napi_base = "{server.base_url}"\n')
        out = tmp_path / "run"
        command = ["run", "--envs", str(telecom_library), "--out", str(out), "--rules", "tau2", "--mode", "conv"]
        command += ["--agent", "oracle", "--user-model", "mock-user", "--scenario", f"tau2-telecom-{USER_ONLY_TASK}"]
        finished = harness(command, {"HARNESS_MODELS_FILE": str(models)})
        assert finished.code == 0, finished.stderr
        requests = [r.body for r in server.chat_requests("user") if r.body]
    (record,) = [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]
    assert record["reward"]["success"] and record["termination"] == "user_stop"
    assert [s["call"]["name"] for s in record["user_steps"]] == ["toggle_airplane_mode", "toggle_data"]
    assert all(not m.get("tool_calls") and m["role"] != "tool" for m in record["messages"])
    user_tools = [t.function.name for t in environment.user_tools]
    assert requests and all([t["function"]["name"] for t in body["tools"]] == user_tools for body in requests)
    last = requests[-1]["messages"]
    assert [m["role"] for m in last].count("tool") == 2  # its own two results, and nothing of the agent's


def _sub_library(library: Path, out: Path, scenarios: list[dict[str, Any]]) -> Path:
    (out / "environments").mkdir(parents=True)
    for file in (library / "environments").iterdir():
        (out / "environments" / file.name).write_bytes(file.read_bytes())
    (out / "scenarios").mkdir()
    (out / "scenarios" / "tau2-telecom.jsonl").write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in scenarios))
    return out


def test_validate_replays_the_users_part_of_the_gold_through_the_dispatcher(
    telecom_library: Path, tmp_path: Path
) -> None:
    """`harness validate` proves a dual-control task solvable only when the user's gold calls run on the user's
    side among the agent's; without them the same task is reported unsolved."""
    lines = (telecom_library / "scenarios" / "tau2-telecom.jsonl").read_bytes().splitlines()
    records = {record["id"]: record for record in map(orjson.loads, lines)}
    chosen = [records[f"tau2-telecom-{USER_ONLY_TASK}"], records[f"tau2-telecom-{DUAL_TASK}"]]
    assert not chosen[0]["reference_actions"] and chosen[0]["user_reference_actions"]
    assert chosen[1]["reference_actions"] and chosen[1]["user_reference_actions"]
    sound = _sub_library(telecom_library, tmp_path / "sound", chosen)
    result = harness_cli("validate", str(sound), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = orjson.loads(result.stdout)
    assert report["ok"] and [r["id"] for r in report["records"] if r["problems"]] == []
    assert all(not r["warnings"] for r in report["records"] if r["kind"] == "scenario")
    without_user = [{**record, "user_reference_actions": []} for record in chosen]
    broken = _sub_library(telecom_library, tmp_path / "broken", without_user)
    result = harness_cli("validate", str(broken), "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    problems = {r["id"]: r["problems"] for r in orjson.loads(result.stdout)["records"] if r["kind"] == "scenario"}
    # The user-only task now has nothing to replay (doing nothing fails its assertions: no proof either way); the
    # dual task's agent part alone misses the environment assertions.
    assert any("do not reach success" in p for p in problems[f"tau2-telecom-{DUAL_TASK}"])
