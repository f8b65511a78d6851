"""τ²'s ``NL_ASSERTION`` reward basis judged by an LLM, end to end through the real CLI: airline tasks of the real
wheel whose basis is made to count their NL assertions (no released task does; upstream counts them only under its
``all_with_nl_assertions`` evaluation) are imported with upstream's judge texts read from its evaluator's source,
run by the oracle under ``--rules tau2`` with a scripted judge on 127.0.0.1, and scored as upstream's evaluator
scores them. Parity: upstream's ``NLAssertionsEvaluator``, run in a venv of its own on our export with the judge's
replies fixed, sends the judge exactly the messages we sent and gives the factor our check gave; on a reply it
cannot read it raises, where our episode is an infrastructure error with no score."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.benchmarks.tau2.nl_assertions import KIND, read_nl_prompts
from harness.benchmarks.tau2.source import Tau2Source
from harness.library import load_library
from tests.doubles.mock_openai import MockOpenAIServer, PolicyRequest, SimulatedUserPolicy
from tests.harness.benchmarks.test_tau2_import import tau2_wheel  # noqa: F401  (fixture)
from tests.support.cached_venv import CachedVenv
from tests.support.cli_process import Finished, harness
from tests.support.stored_runs import lines_of
from tests.support.tau2_venv import tau2_venv

pytestmark = pytest.mark.tau2_venv

AIRLINE = "tau2/data/tau2/domains/airline"
JUDGED = {"19": "all met", "11": "one not met", "0": "garbled"}
"""The tasks whose basis counts NL assertions here, and what the scripted judge answers about them."""
GARBLED = "Sorry, I cannot grade this conversation."
USER_OPENING = "Hello, I need some help with a reservation."

UPSTREAM_JUDGE = r"""
import json, sys
from tau2.data_model.message import AssistantMessage
from tau2.data_model.simulation import Results
import tau2.evaluator.evaluator_nl_assertions as module

results = Results.model_validate_json(open(sys.argv[1]).read())
replies = json.loads(open(sys.argv[2]).read())
tasks = {task.id: task for task in results.tasks}
out = {}
for simulation in results.simulations:
    task = tasks[simulation.task_id]
    sent = []
    def generate(model, messages, reply=None, **kwargs):
        sent.append([{"role": m.role, "content": m.content} for m in messages])
        return AssistantMessage(role="assistant", content=reply)
    module.generate = lambda model, messages, **kwargs: generate(model, messages, replies[simulation.task_id])
    info = module.NLAssertionsEvaluator.calculate_reward(task, simulation.messages)
    module.generate = lambda model, messages, **kwargs: generate(model, messages, sys.argv[3])
    try:
        module.NLAssertionsEvaluator.calculate_reward(task, simulation.messages)
        garbled = None
    except Exception as exc:
        garbled = type(exc).__name__
    out[simulation.task_id] = {
        "sent": sent[0], "reward": info.reward, "met": [c.met for c in info.nl_assertions], "garbled": garbled,
    }
print(json.dumps(out))
"""


class Tau2Judge:
    """Upstream's reply format: one result per expected outcome named in the request (the Python list after
    ``expectedOutcomes:``); the first outcome of task 11 is not met, and task 0 gets text that is not JSON."""

    def __init__(self, assertions_of: dict[str, list[str]]) -> None:
        self.task_of = {tuple(assertions): task for task, assertions in assertions_of.items()}

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        text = str(request.messages[-1]["content"])
        listed = re.search(r"expectedOutcomes:\s*(\[.*\])", text, flags=re.DOTALL)
        assert listed is not None
        outcomes = ast.literal_eval(listed.group(1))
        task = self.task_of[tuple(outcomes)]
        if JUDGED[task] == "garbled":
            return {"content": GARBLED}
        results = [
            {
                "expectedOutcome": o,
                "reasoning": f"graded {i}",
                "metExpectation": not (JUDGED[task] != "all met" and i == 0),
            }
            for i, o in enumerate(outcomes)
        ]
        return {"content": json.dumps({"results": results})}


@pytest.fixture(scope="module")
def judged_source(tau2_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """The wheel unpacked, with three airline tasks counting their NL assertions and a split of just them."""
    folder = tmp_path_factory.mktemp("tau2-judged") / "wheel"
    with zipfile.ZipFile(tau2_wheel) as archive:
        archive.extractall(folder)
    tasks_file = folder / AIRLINE / "tasks.json"
    tasks = json.loads(tasks_file.read_text())
    for task in tasks:
        if task["id"] in JUDGED:
            task["evaluation_criteria"]["reward_basis"] = ["DB", "COMMUNICATE", "NL_ASSERTION"]
    tasks_file.write_text(json.dumps(tasks))
    splits_file = folder / AIRLINE / "split_tasks.json"
    splits = json.loads(splits_file.read_text())
    splits["judged"] = list(JUDGED)
    splits_file.write_text(json.dumps(splits))
    return folder


@pytest.fixture(scope="module")
def library(judged_source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tau2-judged-lib") / "airline"
    args = ["import", "tau2", "--source", str(judged_source), "--domain", "airline", "--split", "judged"]
    finished = harness([*args, "--out", str(out)])
    assert finished.code == 0, finished.stderr
    return out


@pytest.fixture(scope="module")
def server(library: Path) -> Iterator[MockOpenAIServer]:
    assertions = {
        s.provenance.upstream_id or "": list(s.judged_checks[0].asked["nl_assertions"])
        for s in load_library(library).scenarios
    }
    mock = MockOpenAIServer(record_bodies=True)
    mock.set_policy("tau2-user", SimulatedUserPolicy(turns=[USER_OPENING]))
    mock.set_policy("tau2-judge", Tau2Judge(assertions))
    with mock.running_in_thread():
        yield mock


def run_oracle(library: Path, out: Path, server: MockOpenAIServer, *scenarios: str) -> Finished:
    models = out.parent / f"{out.name}-models.toml"
    lines = []
    for alias, model in (("mock-agent", "oracle"), ("mock-user", "tau2-user"), ("mock-judge", "tau2-judge")):
        lines += [f"[aliases.{alias}]", f'model = "hosted_vllm/{model}"', f'api_base = "{server.base_url}"']
    models.write_text("\n".join(lines) + "\n")
    command = ["run", "--envs", str(library), "--out", str(out), "--rules", "tau2", "--mode", "conv"]
    command += [
        "--agent",
        "oracle",
        "--model",
        "mock-agent",
        "--user-model",
        "mock-user",
        "--judge-model",
        "mock-judge",
    ]
    for scenario in scenarios:
        command += ["--scenario", scenario]
    return harness(command, {"HARNESS_MODELS_FILE": str(models)})


def test_the_import_reads_upstreams_judge_texts_into_each_judged_check(
    library: Path,
    tau2_wheel: Path,  # noqa: F811
) -> None:
    source = Tau2Source(tau2_wheel)
    try:
        prompts = read_nl_prompts(source)
    finally:
        source.close()
    scenarios = load_library(library).scenarios
    assert sorted(s.provenance.upstream_id or "" for s in scenarios) == sorted(JUDGED)
    for scenario in scenarios:
        (check,) = scenario.judged_checks
        task = scenario.provenance.details["upstream_task"]
        assert check.kind == KIND and check.prompts == prompts
        assert check.asked == {"nl_assertions": task["evaluation_criteria"]["nl_assertions"]}  # type: ignore[index]
    # The texts are upstream's (read from the source): its system prompt's first line, its user prompt's fields.
    assert prompts["system"].strip().startswith("TASK")
    assert "{trajectory_str}" in prompts["user"] and "{nl_assertions}" in prompts["user"]


def test_judged_nl_assertions_score_as_upstreams_evaluator_on_our_export(
    library: Path, server: MockOpenAIServer, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    finished = run_oracle(library, out, server, "tau2-airline-19", "tau2-airline-11")
    assert finished.code == 0, finished.stderr
    lines = {line["scenario_id"]: line for line in lines_of(out)}
    for scenario_id, holds in (("tau2-airline-19", True), ("tau2-airline-11", False)):
        line = lines[scenario_id]
        results = {r["check_id"]: r["passed"] for r in line["check_results"]}
        assert results.pop("nl_assertions") is holds
        assert results and all(results.values())  # the oracle meets the DB and COMMUNICATE factors
        assert line["reward"]["state_reward"] == (1.0 if holds else 0.0)  # upstream's product of factors
        assert line["usage"]["judge"]["requests"] == 1
    exported = tmp_path / "results.json"
    finished = harness(["export", "tau2", str(out), "--out", str(exported)])
    assert finished.code == 0, finished.stderr
    replies = {line["scenario_id"].rsplit("-", 1)[1]: line["judge"]["exchanges"][0]["reply"] for line in lines.values()}
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    upstream = upstream_judge(tau2_venv(), exported, tmp_path / "replies.json")
    assert sorted(upstream) == ["11", "19"]
    for task_id, theirs in upstream.items():
        ours = lines[f"tau2-airline-{task_id}"]
        exchange = ours["judge"]["exchanges"][0]
        assert exchange["request"] == theirs["sent"]  # the same messages, byte for byte
        ours_passed = next(r["passed"] for r in ours["check_results"] if r["check_id"] == "nl_assertions")
        assert theirs["reward"] == (1.0 if ours_passed else 0.0)
        assert theirs["met"] == [verdict["holds"] for verdict in exchange["verdicts"]]
        assert theirs["garbled"] == "JSONDecodeError"  # upstream raises on a reply it cannot read
    assert upstream["11"]["met"] == [False, True, True]


def test_a_reply_upstream_cannot_read_is_an_infra_error_with_no_score(
    library: Path, server: MockOpenAIServer, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    finished = run_oracle(library, out, server, "tau2-airline-0")
    assert finished.code == 1
    (line,) = lines_of(out)
    assert line["termination"] == "infra_error" and line["reward"] is None
    assert line["failure"]["at_fault"] == "judge" and line["failure"]["kind"] == "judge_reply"
    assert line["failure"]["retryable"] is False
    exchange = line["judge"]["exchanges"][0]
    assert exchange["reply"] == GARBLED and "JSONDecodeError" in exchange["unreadable"]


def upstream_judge(venv: CachedVenv, exported: Path, replies: Path) -> dict[str, Any]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": ""}
    finished = subprocess.run(
        [str(venv.python), "-c", UPSTREAM_JUDGE, str(exported), str(replies), GARBLED],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=venv.root,
        check=False,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    result: dict[str, Any] = orjson.loads(finished.stdout.strip().splitlines()[-1])
    return result
