"""LLM-judged checks through the real command line, with a scripted OpenAI-compatible judge on 127.0.0.1 and a
test-only benchmark package (``tests/support/judgebench``) that declares the judge kind with no engine edit: the
judged verdicts join the checks' results in the reward; every request and reply is stored with the episode and
shown; ``harness rescore`` replays the stored replies without a request, or asks another judge; a judge that is down
makes an infrastructure error that ``--resume --retry-errors`` runs again; an unreadable reply is what the package's
rule says; the judge's cost is reported apart and the manifest pins the judge."""

from __future__ import annotations

import json
import re
import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.doubles.mock_openai import MockOpenAIServer, PolicyRequest
from tests.doubles.seed_replay import register_scenarios
from tests.support.cli_process import REPO, Finished, harness
from tests.support.stored_runs import lines_of

SEED = REPO / "datasets" / "seed"
KIND = "judgebench-claims"
SYSTEM_PROMPT = "JUDGEBENCH: say whether each claim about the conversation holds."
USER_PROMPT = "Conversation:\n{conversation}\n\nClaims:\n{claims}"
CLAIMS = {
    "banking-001": ["HOLDS the agent answered", "HOLDS the agent was polite"],
    "banking-002": ["HOLDS the agent answered", "FAILS the agent apologised"],
    "car_rental-001": ["GARBLED the judge cannot say"],
}


class ScriptedJudge:
    """Answers each claim line of the request: a claim starting HOLDS holds, FAILS does not; GARBLED gets text that
    is not JSON. ``all_hold`` makes every readable claim hold (another judge)."""

    def __init__(self, *, all_hold: bool = False) -> None:
        self.all_hold = all_hold

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        text = str(request.messages[-1].get("content"))
        claims = re.findall(r"^- (.+)$", text, flags=re.MULTILINE)
        if any(claim.startswith("GARBLED") for claim in claims):
            return {"content": "I cannot decide this one, sorry."}
        verdicts = [
            {"claim": claim, "holds": self.all_hold or claim.startswith("HOLDS"), "why": f"because {claim[:5]}"}
            for claim in claims
        ]
        return {"content": json.dumps({"verdicts": verdicts})}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class Setup:
    server: MockOpenAIServer
    models: Path
    library: Path
    site: Path
    down_port: int

    @property
    def env(self) -> dict[str, str]:
        return {"HARNESS_MODELS_FILE": str(self.models), "PYTHONPATH": f"{self.site}:{REPO}"}

    def judge_requests(self, model: str = "judge") -> list[dict[str, Any]]:
        return [r.body for r in self.server.chat_requests(model) if r.body is not None]


def write_library(folder: Path, unreadable: str = "fails") -> Path:
    """The seed library with judged checks on three banking and car-rental scenarios."""
    library = folder / "library"
    shutil.copytree(SEED, library)
    for environment in ("banking", "car_rental"):
        path = library / "scenarios" / f"{environment}.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for record in records:
            if record["id"] in CLAIMS:
                record["judged_checks"] = [
                    {
                        "id": "claims",
                        "kind": KIND,
                        "description": "The claims about the conversation hold.",
                        "asked": {"claims": CLAIMS[record["id"]], "unreadable": unreadable},
                        "prompts": {"system": SYSTEM_PROMPT, "user": USER_PROMPT},
                    }
                ]
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return library


def write_site(folder: Path) -> Path:
    """The test-only package's metadata: its entry point in the ``harness.benchmarks`` group."""
    site = folder / "site"
    info = site / "judgebench-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: judgebench\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[harness.benchmarks]\njudgebench = tests.support.judgebench.benchmark:BENCHMARK\n"
    )
    return site


def write_models(path: Path, base_url: str, down_port: int) -> Path:
    price = "input_usd_per_million = 1000.0\noutput_usd_per_million = 2000.0\n"
    path.write_text(
        f'[aliases.mock-agent]\nmodel = "hosted_vllm/replay"\napi_base = "{base_url}"\n'
        f'[aliases.mock-judge]\nmodel = "hosted_vllm/judge"\napi_base = "{base_url}"\n{price}'
        f'[aliases.other-judge]\nmodel = "hosted_vllm/judge2"\napi_base = "{base_url}"\n{price}'
        f'[aliases.down-judge]\nmodel = "hosted_vllm/judge"\napi_base = "http://127.0.0.1:{down_port}/v1"\n'
    )
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    folder = tmp_path_factory.mktemp("judged")
    server = MockOpenAIServer(record_bodies=True)
    register_scenarios(server)
    server.set_policy("judge", ScriptedJudge())
    server.set_policy("judge2", ScriptedJudge(all_hold=True))
    down_port = free_port()
    with server.running_in_thread():
        models = write_models(folder / "models.toml", server.base_url, down_port)
        yield Setup(server, models, write_library(folder), write_site(folder), down_port)


def run(
    setup: Setup, out: Path, *extra: str, library: Path | None = None, judge: str | None = "mock-judge"
) -> Finished:
    args = ["run", "--envs", str(library or setup.library), "--model", "mock-agent", "--mode", "nonconv"]
    for scenario in CLAIMS:
        args += ["--scenario", scenario]
    if judge is not None:
        args += ["--judge-model", judge]
    return harness([*args, *extra, "--out", str(out)], env=setup.env)


@pytest.fixture(scope="module")
def judged_run(setup: Setup, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Finished, int]:
    before = len(setup.judge_requests())
    out = tmp_path_factory.mktemp("run") / "run"
    finished = run(setup, out)
    return out, finished, len(setup.judge_requests()) - before


def by_scenario(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {line["scenario_id"]: line for line in lines_of(run_dir)}


def test_judged_verdicts_join_the_checks_in_the_reward(judged_run):
    out, finished, asked = judged_run
    assert finished.code == 0, finished.stderr
    assert asked == 3  # one request per judged check of each episode
    lines = by_scenario(out)
    for scenario_id, line in lines.items():
        results = {r["check_id"]: r for r in line["check_results"]}
        others = [r for check_id, r in results.items() if check_id != "claims"]
        assert others and all(r["passed"] for r in others), scenario_id  # the mock agent replays the gold
        reward = line["reward"]
        judged_holds = {"banking-001": True, "banking-002": False, "car_rental-001": False}[scenario_id]
        assert results["claims"]["passed"] is judged_holds
        assert reward["checks_total"] == len(others) + 1
        assert reward["checks_passed"] == len(others) + judged_holds
        assert reward["state_reward"] == pytest.approx((len(others) + judged_holds) / (len(others) + 1))
        assert reward["success"] is judged_holds
    assert "FAILS the agent apologised" in lines["banking-002"]["check_results"][-1]["value"]
    # An unreadable reply under the package's "fails" rule: every claim fails, the episode is scored.
    garbled = lines["car_rental-001"]["judge"]["exchanges"][0]
    assert garbled["reply"] == "I cannot decide this one, sorry."
    assert [v["reason"] for v in garbled["verdicts"]] == ["unreadable reply"]


def test_every_request_and_reply_is_stored_and_shown(setup, judged_run):
    out, _, _ = judged_run
    lines = by_scenario(out)
    record = lines["banking-002"]["judge"]
    assert record["version"] == "1" and record["judge_model"] == "mock-judge"
    exchange = record["exchanges"][0]
    assert exchange["check_id"] == "claims" and exchange["kind"] == KIND
    assert exchange["request"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert "- FAILS the agent apologised" in exchange["request"][1]["content"]
    assert json.loads(exchange["reply"])["verdicts"][1] == {
        "claim": "FAILS the agent apologised",
        "holds": False,
        "why": "because FAILS",
    }
    # What was stored is what the judge was sent.
    sent = [body["messages"] for body in setup.judge_requests()]
    assert exchange["request"] in sent
    shown = harness(["show", str(out), "--episode", lines["banking-002"]["episode_id"]], env=setup.env)
    assert shown.code == 0, shown.stderr
    assert "Judge: claims" in shown.stdout and SYSTEM_PROMPT in shown.stdout
    assert "- FAILS the agent apologised" in shown.stdout
    assert '"why": "because FAILS"' in shown.stdout and "DOES NOT HOLD" in shown.stdout


def test_the_judge_cost_is_reported_apart_and_the_manifest_pins_the_judge(judged_run):
    out, finished, _ = judged_run
    lines = lines_of(out)
    judge_cost = sum(line["usage"]["judge"]["cost_usd"] for line in lines)
    assert judge_cost > 0 and all(line["usage"]["judge"]["requests"] == 1 for line in lines)
    overall = json.loads((out / "summary.json").read_text())["overall"]
    assert overall["judge_requests"] == 3
    assert overall["judge_cost_usd"] == pytest.approx(judge_cost)
    assert overall["total_cost_usd"] >= overall["judge_cost_usd"]
    assert f"judge: 3 requests, cost $ {judge_cost:.4f}" in finished.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["judge_model"] == "mock-judge"
    assert manifest["config"]["judge"]["model"] == "mock-judge"
    assert manifest["config"]["judge"]["temperature"] == 0.0
    assert manifest["model_resolution"]["mock-judge"]["provider_model"] == "hosted_vllm/judge"


def test_rescore_replays_the_stored_replies_without_asking_the_judge(setup, judged_run, tmp_path):
    out, _, _ = judged_run
    asked_before = len(setup.server.chat_requests())
    rescored = tmp_path / "replayed"
    finished = harness(["rescore", str(out), "--envs", str(setup.library), "--out", str(rescored)], env=setup.env)
    assert finished.code == 0, finished.stderr
    assert len(setup.server.chat_requests()) == asked_before  # no request at all
    assert "3 decided by their stored judge replies" in finished.stdout
    before, after = by_scenario(out), by_scenario(rescored)
    for scenario_id, line in after.items():
        assert line["check_results"] == before[scenario_id]["check_results"]
        assert line["reward"] == before[scenario_id]["reward"]
        assert all(e["replayed"] for e in line["judge"]["exchanges"])
        assert [e["reply"] for e in line["judge"]["exchanges"]] == [
            e["reply"] for e in before[scenario_id]["judge"]["exchanges"]
        ]


def test_rescore_with_another_judge_asks_it(setup, judged_run, tmp_path):
    out, _, _ = judged_run
    asked_before = len(setup.judge_requests("judge2"))
    rescored = tmp_path / "rejudged"
    args = ["rescore", str(out), "--envs", str(setup.library), "--out", str(rescored), "--judge-model", "other-judge"]
    finished = harness(args, env=setup.env)
    assert finished.code == 0, finished.stderr
    assert len(setup.judge_requests("judge2")) - asked_before == 3
    lines = by_scenario(rescored)
    assert lines["banking-002"]["reward"]["success"] is True  # the other judge holds every readable claim
    assert lines["car_rental-001"]["reward"]["success"] is False  # its reply is still unreadable
    exchange = lines["banking-002"]["judge"]["exchanges"][0]
    assert not exchange["replayed"] and lines["banking-002"]["judge"]["judge_model"] == "other-judge"
    manifest = json.loads((rescored / "manifest.json").read_text())
    assert manifest["config"]["judge"]["model"] == "other-judge"
    assert manifest["model_resolution"]["other-judge"]["provider_model"] == "hosted_vllm/judge2"


def test_a_library_with_judged_checks_needs_a_judge_it_can_route_and_kinds_that_are_declared(setup, tmp_path):
    asked_before = len(setup.server.chat_requests())
    finished = run(setup, tmp_path / "run", judge=None)
    assert finished.code == 2
    assert "give --judge-model MODEL" in finished.stderr
    assert not (tmp_path / "run" / "results.jsonl").exists()
    finished = run(setup, tmp_path / "run", judge="no-such-judge")
    assert finished.code == 2 and "'no-such-judge' is neither a model alias" in finished.stderr
    library = write_library(tmp_path)
    path = library / "scenarios" / "banking.jsonl"
    path.write_text(path.read_text().replace(KIND, "nobody-declares"))
    finished = run(setup, tmp_path / "run", library=library)
    assert finished.code == 2
    assert "judge kind 'nobody-declares' is not declared by any installed benchmark" in finished.stderr
    assert "Traceback" not in finished.stderr
    assert not (tmp_path / "run" / "results.jsonl").exists()
    assert len(setup.server.chat_requests()) == asked_before  # nothing ran


def test_rescore_refuses_a_judge_it_cannot_route(setup, judged_run, tmp_path):
    out, _, _ = judged_run
    args = ["rescore", str(out), "--envs", str(setup.library), "--out", str(tmp_path / "x"), "--judge-model", "nope"]
    finished = harness(args, env=setup.env)
    assert finished.code == 2 and "--judge-model: model 'nope' is neither" in finished.stderr
    assert not (tmp_path / "x").exists()


def test_a_judge_that_is_down_is_an_infra_error_that_retry_errors_runs_again(setup, tmp_path):
    out = tmp_path / "run"
    finished = run(setup, out, judge="down-judge")
    assert finished.code == 1, finished.stderr
    for line in lines_of(out):
        assert line["termination"] == "infra_error" and line["reward"] is None
        assert line["failure"]["at_fault"] == "judge" and line["failure"]["retryable"] is True
        assert line["judge"]["exchanges"][0]["reply"] is None
    # The same judge, now answering: the episodes run again and are judged.
    live = MockOpenAIServer(port=setup.down_port, record_bodies=True)
    register_scenarios(live)
    live.set_policy("judge", ScriptedJudge())
    with live.running_in_thread():
        again = run(setup, out, "--resume", "--retry-errors", judge="down-judge")
        judged = len([r for r in live.chat_requests("judge")])
    assert again.code == 0, again.stderr
    assert judged == 3
    lines = by_scenario(out)
    assert {s: line["termination"] for s, line in lines.items()} == dict.fromkeys(CLAIMS, "agent_done")
    assert lines["banking-001"]["reward"]["success"] is True
    assert lines["banking-002"]["reward"]["success"] is False


def test_an_unreadable_reply_under_a_no_score_rule_is_an_unretryable_infra_error(setup, tmp_path):
    library = write_library(tmp_path, unreadable="no_score")
    out = tmp_path / "run"
    finished = run(setup, out, library=library)
    assert finished.code == 1, finished.stderr
    lines = by_scenario(out)
    garbled = lines["car_rental-001"]
    assert garbled["termination"] == "infra_error" and garbled["reward"] is None
    assert garbled["failure"]["at_fault"] == "judge" and garbled["failure"]["kind"] == "judge_reply"
    assert garbled["failure"]["retryable"] is False
    assert garbled["judge"]["exchanges"][0]["unreadable"].startswith("not a verdicts object")
    assert lines["banking-001"]["reward"]["success"] is True  # readable replies score as before
    shown = harness(["show", str(out), "--episode", garbled["episode_id"]], env=setup.env)
    assert shown.code == 0 and "unreadable: not a verdicts object" in shown.stdout
    assert orjson.loads((out / "summary.json").read_bytes())["overall"]["infra_errors"] == 1
