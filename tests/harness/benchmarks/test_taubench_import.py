"""τ-bench imported from a checkout in its layout (a made-up domain, tests/support/taubench_checkout.py), read as text
and never imported: the importer's output, the tools answering with upstream's texts in the jail, the gold's data
hash as the check, and bad sources refused in one line."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from harness.benchmarks.taubench.importer import data_hash, json_hash
from harness.episode.dispatch import DispatchSession, open_tool_session
from harness.library import load_library
from harness.sandbox import JailSpec
from harness.schema import Environment, ToolCall
from tests.support.cli_process import harness_cli
from tests.support.taubench_checkout import DATA, TOOL_INFOS, WIKI, write_checkout


@pytest.fixture(scope="session")
def taubench_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkout(tmp_path_factory.mktemp("taubench") / "tau-bench")


@pytest.fixture(scope="session")
def shop_library(taubench_checkout: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("taubench-lib") / "shop"
    result = harness_cli(
        "import", "taubench", "--source", str(taubench_checkout), "--domain", "shop", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert "5 tasks" in result.stdout and "1 with gold actions that answer with an error" in result.stdout
    # The task whose gold answers with an error is kept, and reported.
    assert "taubench-shop-test-3: gold action 1 (buy_item) answers: Error: not enough stock" in result.stderr
    return out


def test_the_import_holds_upstreams_tools_data_tasks_and_provenance(shop_library: Path) -> None:
    library = load_library(shop_library)
    (environment,) = library.environments.values()
    assert environment.id == "taubench-shop"
    # The schemas are what each tool's get_info() returns, run in the jail, in ALL_TOOLS order.
    assert [tool.model_dump(mode="json") for tool in environment.tools] == TOOL_INFOS
    assert environment.introduction == WIKI
    assert environment.provenance.source == "taubench"
    assert environment.provenance.details["source_license"] == "mit"
    assert environment.provenance.details["terminate_tools"] == ["transfer_to_human_agents"]
    scenarios = sorted(library.scenarios, key=lambda s: s.id)
    assert [s.id for s in scenarios] == [f"taubench-shop-test-{i}" for i in range(5)]
    first, second, third, fourth, fifth = scenarios
    assert first.initial_state == {"data": {"customers": DATA["customers.json"], "items": DATA["items.json"]}}
    assert first.task == "You are Ann (ann@example.com). You want to buy two lamps."
    assert first.provenance.details["user_id"] == "ann_7"
    assert [(a.name, a.arguments) for a in first.reference_actions] == [
        ("find_customer", {"email": "ann@example.com"}),
        ("buy_item", {"customer_id": "ann_7", "item_id": "lamp", "quantity": 2}),
    ]
    assert [c.id for c in first.checks] == ["taubench-data"]
    assert [c.id for c in second.checks] == ["taubench-data", "taubench-output-0"]
    assert second.reference_reply == "59.97"
    # A read-only gold (and one whose write answers with an error) reaches the initial data's hash.
    for scenario in (second, third, fourth, fifth):
        assert scenario.provenance.details["gold_data_hash"] == data_hash(scenario.initial_state["data"])
    assert first.provenance.details["gold_data_hash"] != data_hash(first.initial_state["data"])
    assert fourth.provenance.details["gold_errors"] == ["gold action 1 (buy_item) answers: Error: not enough stock"]
    # A gold with no action at all: nothing to replay, nothing to say; the data check holds at reset.
    assert fifth.reference_actions == [] and fifth.reference_reply is None
    assert [c.id for c in fifth.checks] == ["taubench-data"]


def test_the_tools_answer_in_the_jail_as_upstreams_env_step_does(shop_library: Path) -> None:
    (environment,) = load_library(shop_library).environments.values()
    scenario = next(s for s in load_library(shop_library).scenarios if s.id == "taubench-shop-test-0")

    async def answers(env: Environment, calls: list[tuple[str, dict[str, object]]]) -> list[object]:
        async with JailSpec(workers=1).pool() as pool:
            session = await open_tool_session(pool, env, scenario.initial_state, record_diffs=False)
            assert isinstance(session, DispatchSession)
            try:
                out = []
                for i, (name, arguments) in enumerate(calls):
                    out.append((await session.call_raw(ToolCall(id=f"c{i}", name=name, arguments=arguments))).content)
                return out
            finally:
                await session.close()

    texts = asyncio.run(
        answers(
            environment,
            [
                ("find_customer", {"email": "bo@example.com"}),
                ("get_item", {"item_id": "rug"}),
                ("get_item", {"item_id": "sofa"}),
                ("get_item", {"id": "rug"}),
                ("no_such_tool", {}),
                ("calculate", {"expression": "3 * 19.99"}),
                ("calculate", {"expression": "1 / 0"}),
                ("buy_item", {"customer_id": "bo_3", "item_id": "rug", "quantity": 1}),
            ],
        )
    )
    assert texts == [
        "bo_3",
        '{"price": 80.0, "stock": 2}',
        "Error: 'sofa'",
        "Error: GetItem.invoke() got an unexpected keyword argument 'id'",
        "Unknown action no_such_tool",
        "59.97",
        "Error: division by zero",
        "Error: balance too low",
    ]


def test_other_splits_import_and_bad_sources_are_refused_in_one_line(taubench_checkout: Path, tmp_path: Path) -> None:
    dev = harness_cli(
        "import", "taubench", "--source", str(taubench_checkout), "--domain", "shop", "--split", "dev",
        "--out", str(tmp_path / "dev"),
    )  # fmt: skip
    assert dev.returncode == 0, dev.stderr
    assert [s.id for s in load_library(tmp_path / "dev").scenarios] == ["taubench-shop-dev-0"]

    other = tmp_path / "not-taubench"
    (other / "src" / "tau2").mkdir(parents=True)
    a_file = tmp_path / "checkout.zip"
    a_file.write_bytes(b"PK")
    cases = {
        "missing": (["--source", str(tmp_path / "nope"), "--domain", "shop"], "does not exist"),
        "file": (["--source", str(a_file), "--domain", "shop"], "is a file; expected a τ-bench checkout folder"),
        "layout": (
            ["--source", str(other), "--domain", "shop"],
            "is not a τ-bench checkout: found src/; expected tau_bench/envs/base.py and tau_bench/types.py",
        ),
        "domain": (["--source", str(taubench_checkout), "--domain", "retail"], "no domain 'retail'"),
        "split": (
            ["--source", str(taubench_checkout), "--domain", "shop", "--split", "train"],
            "no split 'train' for shop; it has test, dev",
        ),
    }
    for case, (args, message) in cases.items():
        result = harness_cli("import", "taubench", *args, "--out", str(tmp_path / case))
        assert result.returncode == 2, (case, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], (case, result.stderr)
        assert "Traceback" not in result.stderr
        assert not (tmp_path / case).exists()
    domain = harness_cli(
        "import", "taubench", "--source", str(taubench_checkout), "--domain", "retail", "--out", str(tmp_path / "r")
    )
    assert "it holds shop" in domain.stderr


def test_the_checks_json_hash_agrees_with_upstreams_data_hash() -> None:
    # Upstream: sha256 of str() of the data as sorted nested tuples (tau_bench/envs/base.py to_hashable).
    value = {"b": [1, 2.0, {"y": None, "x": True}], "a": "x"}
    expected = (("a", "x"), ("b", (1, 2.0, (("x", True), ("y", None)))))
    assert data_hash(value) == hashlib.sha256(str(expected).encode("utf-8")).hexdigest()
    # The data check compares sorted JSON instead: equal exactly when upstream's hashes are equal.
    variants = [
        value,
        {"a": "x", "b": [1, 2.0, {"x": True, "y": None}]},
        {"a": "x", "b": [1, 2, {"x": True, "y": None}]},
        {"a": "x", "b": [1, 2.0, {"x": 1, "y": None}]},
        {"a": "x", "b": [2.0, 1, {"x": True, "y": None}]},
        {"a": "x ", "b": [1, 2.0, {"x": True, "y": None}]},
        {"a": "x", "b": [1, 2.0, {"x": True, "y": None}], "c": []},
    ]
    for left in variants:
        for right in variants:
            assert (json_hash(left) == json_hash(right)) == (data_hash(left) == data_hash(right)), (left, right)
