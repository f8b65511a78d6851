"""Fixtures and record factories for the Hub tests (imported by the ``test_hub_*`` modules)."""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.schema import (
    AgentSettings,
    Check,
    CheckResult,
    DatasetRef,
    DiffEntry,
    Environment,
    FunctionSpec,
    ModelSettings,
    Observation,
    ObservationKind,
    Provenance,
    ReferenceAction,
    RewardBreakdown,
    RunManifest,
    Scenario,
    StateEntity,
    Step,
    TerminationReason,
    Timings,
    ToolCall,
    ToolSpec,
    Trajectory,
    Usage,
    UserProfile,
)
from tests.support import hub_env

# The `datasets` library. Imported by name so that type checkers do not resolve the project's own
# `datasets/` data folder instead.
hf_datasets = importlib.import_module("datasets")

ENV_CODE = '''class OrderDesk:
    """Orders of a small shop."""

    def __init__(self, state):
        self.orders = state["orders"]

    def get_order(self, order_id: str) -> dict:
        """Look an order up."""
        return self.orders[order_id]

    def cancel_order(self, order_id: str) -> dict:
        """Cancel a pending order."""
        order = self.orders[order_id]
        if order["status"] != "pending":
            return {"error": "only pending orders can be cancelled"}
        order["status"] = "cancelled"
        return order
'''


@pytest.fixture(scope="session")
def hub_server():
    return hub_env.hub_server()


@pytest.fixture
def hub(hub_server) -> Iterator[Any]:
    """The running server with no pending faults; faults left by a test are cleared afterwards."""
    hub_server.faults.clear()
    yield hub_server
    hub_server.faults.clear()


@pytest.fixture
def repo_id() -> str:
    return f"envharness-tests/ds-{uuid.uuid4().hex[:12]}"


def make_environment(index: int) -> Environment:
    tools = [
        ToolSpec(
            function=FunctionSpec(
                name="get_order",
                description="Look an order up.",
                parameters={
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"],
                },
            )
        ),
        ToolSpec(function=FunctionSpec(name="cancel_order", description="Cancel a pending order.")),
    ]
    return Environment(
        id=f"order_desk_{index}",
        name=f"Order desk {index}",
        domain="retail" if index % 2 == 0 else "logistics",
        summary="A shop's order desk.",
        introduction="You help customers with their orders.\nBe polite — and exact.",
        rules=["Only pending orders can be cancelled.", "Confirm the order id first."],
        state_entities=[StateEntity(name="Order", attributes=["order_id", "status"], description="An order.")],
        tools=tools,
        class_name="OrderDesk",
        code=ENV_CODE,
        provenance=Provenance(
            source="synthesis",
            model="qwen3-8b",
            prompt_version="skeleton-v2",
            created_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
            upstream_id=f"envscaler:{index}" if index % 3 == 0 else None,
            details={"attempts": 2, "score": 0.875},
        ),
    )


def make_scenario(index: int, environment_id: str = "order_desk_0") -> Scenario:
    return Scenario(
        id=f"scenario_{index:05d}",
        environment_id=environment_id,
        initial_state={
            "orders": {
                f"O-{index}": {"status": "pending", "total": 12.5, "items": [1, 2, 3], "note": None},
                "O-emoji": {"status": "shipped", "total": 3, "items": [], "note": "naïve ✓ 注文"},
            },
            "counter": index,
        },
        task=f"Cancel order O-{index} for the customer.",
        user_profile=UserProfile(
            persona="A busy customer",
            goal=f"Get order O-{index} cancelled",
            known_info=[f"order id O-{index}"],
            withheld_info=["email address"],
        )
        if index % 2 == 0
        else None,
        checks=[
            Check(
                id="cancelled",
                description="The order is cancelled.",
                source=f"def check(initial_state, final_state):\n    return final_state['orders']['O-{index}']"
                "['status'] == 'cancelled'\n",
            )
        ],
        reference_actions=[
            ReferenceAction(name="get_order", arguments={"order_id": f"O-{index}"}),
            ReferenceAction(name="cancel_order", arguments={"order_id": f"O-{index}"}, masked_arguments=["reason"]),
        ],
        gold_final_state={"orders": {f"O-{index}": {"status": "cancelled"}}} if index % 3 == 0 else None,
        difficulty="easy" if index % 2 else None,
        tags=["cancel", "retail"],
        provenance=Provenance(source="handwritten", created_at=datetime(2026, 1, 1, tzinfo=UTC)),
    )


def make_trajectory(index: int) -> Trajectory:
    call = ToolCall(id="call_1", name="cancel_order", arguments={"order_id": "O-1"}, raw_arguments='{"order_id":"O-1"}')
    return Trajectory(
        episode_id=f"ep-{index}",
        run_id="run-1",
        scenario_id=f"scenario_{index:05d}",
        environment_id="order_desk_0",
        mode="conv" if index % 2 else "nonconv",
        trial=index % 3,
        agent=AgentSettings(model=ModelSettings(model="qwen3-8b", temperature=0.0, seed=7)),
        user=AgentSettings(role="user", model=ModelSettings(model="local")) if index % 2 else None,
        tools=[ToolSpec(function=FunctionSpec(name="cancel_order"))],
        messages=[
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "Cancel O-1"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "cancel_order", "arguments": '{"order_id":"O-1"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "cancelled"}'},
            {"role": "assistant", "content": "Done."},
        ],
        steps=[
            Step(
                index=0,
                call=call,
                observation=Observation(tool_call_id="call_1", name="cancel_order", content={"status": "cancelled"}),
                state_diff=[
                    DiffEntry(path=["orders", "O-1", "status"], op="change", before="pending", after="cancelled")
                ],
                duration_ms=1.25,
            ),
            Step(
                index=1,
                call=ToolCall(id="call_2", name="nope", raw_arguments="{bad json"),
                observation=Observation(
                    tool_call_id="call_2", name="nope", kind=ObservationKind.UNKNOWN_TOOL, error="unknown tool nope"
                ),
            ),
        ],
        final_state_diff=[
            DiffEntry(path=["orders", "O-1", "status"], op="change", before="pending", after="cancelled")
        ],
        check_results=[
            CheckResult(
                check_id="cancelled",
                passed=index % 2 == 0,
                value=None if index % 2 == 0 else "False",
                passed_at_reset=False,
            )
        ],
        reward=RewardBreakdown(
            state_reward=1.0 if index % 2 == 0 else 0.0,
            delta_reward=None,
            success=index % 2 == 0,
            checks_passed=1 - index % 2,
            checks_total=1,
        )
        if index != 3
        else None,
        termination=TerminationReason.AGENT_DONE if index != 3 else TerminationReason.INFRA_ERROR,
        termination_detail=None if index != 3 else "worker crashed",
        usage={"agent": Usage(requests=2, prompt_tokens=120, completion_tokens=30, cost_usd=0.0001)},
        timings=Timings(
            started_at=datetime(2026, 1, 3, tzinfo=UTC),
            ended_at=datetime(2026, 1, 3, 0, 0, 2, tzinfo=UTC),
            wall_seconds=2.0,
        ),
        errors=[] if index != 3 else ["sandbox worker died"],
    )


def make_manifest() -> RunManifest:
    return RunManifest(
        run_id="run-1",
        created_at=datetime(2026, 1, 3, 1, 2, 3, 456789, tzinfo=UTC),
        package_version="0.1.0",
        git_revision="abc1234",
        dataset=DatasetRef(source="envharness-tests/library", revision="0" * 40, fingerprint="f" * 16),
        config={"models": ["qwen3-8b"], "trials": 3, "max_steps": 30},
        model_resolution={"qwen3-8b": {"provider_model": "openai/qwen3-8b", "api_base": "http://127.0.0.1:1"}},
        episodes_planned=4,
    )


def sft_rows() -> dict[str, list[dict[str, Any]]]:
    chat = [
        {
            "messages": [
                {"role": "system", "content": "You are an order desk agent."},
                {"role": "user", "content": f"Cancel O-{i}"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "cancel_order", "arguments": f'{{"order_id": "O-{i}"}}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                {"role": "assistant", "content": "Cancelled."},
            ],
            "tools": [{"type": "function", "function": {"name": "cancel_order", "parameters": {"type": "object"}}}],
            "scenario_id": f"scenario_{i:05d}",
            "state_reward": 1.0,
        }
        for i in range(3)
    ]
    sharegpt = [
        {
            "conversations": [
                {"from": "human", "value": "Where is O-1?"},
                {"from": "function_call", "value": '{"name": "get_order", "arguments": {"order_id": "O-1"}}'},
                {"from": "observation", "value": '{"status": "shipped"}'},
                {"from": "gpt", "value": "It has shipped."},
            ],
            "system": "You are an order desk agent.",
            "tools": '[{"name": "get_order"}]',
        }
    ]
    return {"chat_nonconv": chat, "sharegpt": sharegpt}


def leaderboard_rows() -> list[dict[str, Any]]:
    """Rows as `harness leaderboard build` writes them to leaderboard.jsonl (JSON: pass^k keys are text)."""
    from leaderboards.aggregate import LeaderboardRow

    common = {
        "settings": "temperature=0",
        "dataset_source": "envharness-tests/library",
        "dataset_revision": "a" * 40,
        "dataset_fingerprint": "f" * 16,
        "episodes": 4,
        "scored": 4,
        "infra_errors": 0,
        "tasks": 2,
        "terminations": {"agent_done": 4},
        "per_mode": {"nonconv": 0.5},
    }
    rows = [
        LeaderboardRow(
            rank=1,
            model="qwen3-8b",
            settings_id="s1",
            agent=AgentSettings(model=ModelSettings(model="qwen3-8b", temperature=0.0, extra={"top_k": 20})),
            runs=["run-1", "run-2"],
            success_rate=0.5,
            mean_state_reward=0.75,
            pass_hat_k={1: 0.5, 2: 0.25},
            per_domain={"retail": 0.5, "travel": None},
            **common,
        ),
        LeaderboardRow(
            rank=2,
            model="local",
            settings_id="s2",
            agent=AgentSettings(model=ModelSettings(model="local")),
            user=AgentSettings(role="user", model=ModelSettings(model="local")),
            runs=["run-3"],
            success_rate=0.25,
            pass_hat_k={1: 0.25},
            per_domain={"retail": 0.25},
            **common,
        ),
    ]
    return [orjson.loads(row.model_dump_json()) for row in rows]


def write_run_folder(folder: Path, trajectories: list[Trajectory], manifest: RunManifest) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(manifest.model_dump_json())
    (folder / "results.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in trajectories))
    return folder


def all_file_bytes(folder: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file())
