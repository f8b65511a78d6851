"""``harness export atif`` and ``harness export leaderboard-json`` on a stored run, through the real command line."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from harness.results.metrics import load_run
from harness.results.tally import summarize
from tests.support.cli_process import harness
from tests.support.stored_runs import lines_of, mock_model_run

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "data" / "atif" / "atif-v1.4.schema.json").read_text())


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory) -> Path:
    return mock_model_run(tmp_path_factory.mktemp("stored"), ["banking-001", "car_rental-001"])


def test_atif_documents_validate_and_keep_every_tool_call_id(stored_run, tmp_path):
    out = tmp_path / "atif"
    finished = harness(["export", "atif", str(stored_run), "--out", str(out)])
    assert finished.code == 0, finished.stderr
    validator = jsonschema.Draft202012Validator(SCHEMA)
    records = {line["episode_id"]: line for line in lines_of(stored_run)}
    assert {path.stem for path in out.glob("*.json")} == set(records)
    for episode_id, record in records.items():
        document = json.loads((out / f"{episode_id}.json").read_text())
        errors = sorted(validator.iter_errors(document), key=str)
        assert not errors, errors[0].message
        agent_steps = [step for step in document["steps"] if step["source"] == "agent"]
        exported_calls = [call for step in agent_steps for call in step.get("tool_calls", [])]
        recorded_calls = [step["call"] for step in record["steps"]]
        assert [c["tool_call_id"] for c in exported_calls] == [c["id"] for c in recorded_calls]
        assert [c["function_name"] for c in exported_calls] == [c["name"] for c in recorded_calls]
        assert [c["arguments"] for c in exported_calls] == [c["arguments"] for c in recorded_calls]
        for step in agent_steps:
            call_ids = [call["tool_call_id"] for call in step.get("tool_calls", [])]
            results = step.get("observation", {}).get("results", [])
            assert [result["source_call_id"] for result in results] == call_ids
        assert document["extra"]["reward"] == record["reward"]
        assert document["extra"]["versions"] == record["versions"]
        users = [step["message"] for step in document["steps"] if step["source"] == "user"]
        assert users and users[0]


def test_a_document_that_breaks_the_format_is_caught_by_the_schema():
    """The schema is strict enough to fail: a step without a source, and a tool call without its id."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    document = {
        "schema_version": "ATIF-v1.4",
        "session_id": "s",
        "agent": {"name": "a", "version": "1"},
        "steps": [{"step_id": 1, "message": "hi"}],
    }
    assert not validator.is_valid(document)
    document["steps"] = [
        {"step_id": 1, "source": "agent", "message": "", "tool_calls": [{"function_name": "f", "arguments": {}}]}
    ]
    assert not validator.is_valid(document)


def test_an_unsafe_episode_id_writes_nothing(stored_run, tmp_path):
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / "manifest.json").write_text((stored_run / "manifest.json").read_text())
    line = lines_of(stored_run)[0]
    line["episode_id"] = "../../escaped"
    (hostile / "results.jsonl").write_text(json.dumps(line) + "\n")
    out = tmp_path / "atif"
    finished = harness(["export", "atif", str(hostile), "--out", str(out)])
    assert finished.code == 2 and "cannot name a file" in finished.stderr
    assert not out.exists() and not (tmp_path / "escaped.json").exists()


def test_leaderboard_json_has_the_summary_numbers_and_versions(stored_run, tmp_path):
    out = tmp_path / "submission.json"
    finished = harness(["export", "leaderboard-json", str(stored_run), "--out", str(out)])
    assert finished.code == 0, finished.stderr
    submission = json.loads(out.read_text())
    manifest, trajectories = load_run(stored_run)
    expected = {(g.key["environment_id"], g.key["mode"]): g for g in summarize(trajectories)}
    assert {(e["environment_id"], e["mode"]) for e in submission["entries"]} == set(expected) and len(expected) == 4
    for entry in submission["entries"]:
        group = expected[(entry["environment_id"], entry["mode"])]
        assert entry["pass_hat_k"] == {str(k): v for k, v in group.pass_hat_k.items()} and "2" in entry["pass_hat_k"]
        assert entry["success_rate"] == group.success_rate and entry["mean_reward"] == group.mean_state_reward
        assert len(entry["versions"]["environments"]) == 1 and entry["versions"]["checks"]
        assert entry["versions"]["rules"] == ["harness"] and entry["versions"]["unversioned_episodes"] == 0
    assert submission["checks_version"] == manifest.checks_version and submission["model"] == "mock-agent"


def test_policy_tokens_land_on_their_agent_steps():
    """A trainer's rollout: each run of the policy's own tokens (env_mask 1) is one agent turn's completion."""
    from harness.results.atif import to_atif
    from harness.schema import AgentSettings, ModelSettings, PolicyTokens, TerminationReason, Trajectory

    trajectory = Trajectory(
        episode_id="e1",
        scenario_id="s",
        environment_id="env",
        mode="nonconv",
        agent=AgentSettings(model=ModelSettings(model="policy")),
        termination=TerminationReason.AGENT_DONE,
        messages=[
            {"role": "user", "content": "do it"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "done"},
        ],
        policy_tokens=PolicyTokens(
            prompt_ids=[1, 2], completion_ids=[10, 11, 50, 51, 12], logprobs=[-0.1, -0.2, 0, 0, -0.3],
            env_mask=[1, 1, 0, 0, 1],
        ),
    )  # fmt: skip
    document = to_atif(trajectory)
    agent = [step for step in document["steps"] if step["source"] == "agent"]
    assert agent[0]["metrics"] == {
        "completion_token_ids": [10, 11],
        "logprobs": [-0.1, -0.2],
        "prompt_token_ids": [1, 2],
    }
    assert agent[1]["metrics"] == {"completion_token_ids": [12], "logprobs": [-0.3]}
    assert jsonschema.Draft202012Validator(SCHEMA).is_valid(document)
