"""ACEBench's simulated user under ``--rules acebench`` and ``acebench-text`` is upstream's ``APIUSER``: the import
reads its prompt constants and, from ``get_init_prompt``'s syntax tree, the line it answers first (per language);
the run sends the prompt formatted with the task's question byte for byte, that opening line, and the user's own
earlier lines as "system" messages. The text setting's agent gets upstream's instructions and the domain prompt;
EnvScaler's preset keeps its own prompts; a library imported before the prompts were stored is refused with one
line. Real CLI, real jail, the recording mock OpenAI server."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.benchmarks.acebench.source import AceBenchSource
from harness.benchmarks.acebench.user_prompt import DETAILS_KEY, AceBenchUserPrompt, read_user_prompts
from harness.library import load_library
from tests.doubles.mock_openai import MockOpenAIServer, PolicyRequest, SimulatedUserPolicy
from tests.harness.benchmarks.test_acebench_import import (  # noqa: F401  (fixtures)
    acebench_checkout,
    multi_step_library,
    multi_turn_library,
)
from tests.support.acebench_checkout import AGENT_PROMPTS, FUNCTIONS, MULTI_TURN, USER_OPENINGS, USER_PROMPTS
from tests.support.cli_process import Finished, harness

FIRST_LINE = "Hello, please sort out my notes."
TASK = "acebench-multi-turn-en-1"  # BaseApi and NoteApi: BaseApi's user prompt


@dataclass
class SaysDone:
    """An agent that answers the user with one text line and then says the finishing phrase."""

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        said = sum(1 for m in request.messages if m.get("role") == "assistant")
        text = request.messages[-1].get("content") or ""
        done = said >= 1 or "agent:" in text
        return {"role": "assistant", "content": "finish conversation" if done else "Which note?"}


@pytest.fixture(scope="module")
def server() -> Iterator[MockOpenAIServer]:
    mock = MockOpenAIServer()
    mock.set_policy("ap-user", SimulatedUserPolicy(turns=[FIRST_LINE, "The oldest one."], stop_token="x-never"))
    mock.set_policy("ap-agent", SaysDone())
    mock.set_policy("ap-text-agent", SaysDone())
    mock.set_policy("ap-paper-agent", SaysDone())
    with mock.running_in_thread():
        yield mock


def run(library: Path, out: Path, server: MockOpenAIServer, agent: str, rules: str, *args: str) -> Finished:
    models = out.parent / f"{out.name}-models.toml"
    lines = []
    for alias, name in (("ap-a", agent), ("ap-u", "ap-user")):
        lines += [f"[aliases.{alias}]", f'model = "hosted_vllm/{name}"', f'api_base = "{server.base_url}"']
    models.write_text("\n".join(lines) + "\n")
    command = ["run", "--envs", str(library), "--out", str(out), "--model", "ap-a", "--user-model", "ap-u"]
    command += ["--mode", "conv", "--concurrency", "1", "--rules", rules, "--scenario", TASK, *args]
    return harness(command, {"HARNESS_MODELS_FILE": str(models)})


UPSTREAM_SAMPLING = {"temperature": 0.001, "top_p": 1.0, "max_tokens": 1000}
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "tool_choice", "n", "stop")


def sampling_of(body: dict[str, Any]) -> dict[str, Any]:
    """The sampling parameters a request carries."""
    return {key: body[key] for key in SAMPLING_KEYS if key in body}


def user_requests_since(server: MockOpenAIServer, before: int) -> list[dict[str, Any]]:
    return [r.body for r in server.chat_requests("ap-user")[before:] if r.body]


def test_the_import_reads_the_user_prompt_and_the_opening_from_the_checkout(
    acebench_checkout: Path,  # noqa: F811
    multi_turn_library: Path,  # noqa: F811
    multi_step_library: Path,  # noqa: F811
) -> None:
    # Both languages' openings are read from get_init_prompt's branches (the fixture has English data only).
    source = AceBenchSource(acebench_checkout)
    for language in ("en", "zh"):
        prompts = read_user_prompts(source, language)
        for variant in ("BaseApi", "Travel"):
            assert prompts[variant].template == USER_PROMPTS[(variant, language)]
            assert prompts[variant].opening == USER_OPENINGS[language]
    library = load_library(multi_turn_library)
    by_question = {s.task: s for s in library.scenarios}
    assert sorted(by_question) == sorted({question for question, *_ in MULTI_TURN})
    for scenario in library.scenarios:
        stored = AceBenchUserPrompt.model_validate(scenario.provenance.details[DETAILS_KEY])
        assert stored.source == "model_inference/multi_turn/APIModel_user.py:SYSTEM_PROMPT_BASE_EN"
        assert stored.render(scenario.task) == USER_PROMPTS[("BaseApi", "en")].format(instruction=scenario.task)
    # multi_step has no user upstream: nothing is stored.
    assert all(DETAILS_KEY not in s.provenance.details for s in load_library(multi_step_library).scenarios)


def assert_upstreams_user(bodies: list[dict[str, Any]]) -> None:
    question = MULTI_TURN[1][0]
    system = {"role": "system", "content": USER_PROMPTS[("BaseApi", "en")].format(instruction=question)}
    assert bodies[0]["messages"] == [system, {"role": "user", "content": USER_OPENINGS["en"]}]
    assert bodies[1]["messages"][:3] == [*bodies[0]["messages"], {"role": "system", "content": FIRST_LINE}]
    assert bodies[1]["messages"][3] == {"role": "user", "content": "Which note?"}


def test_the_native_rules_send_upstreams_user_byte_for_byte(
    multi_turn_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    before = len(server.chat_requests("ap-user"))
    finished = run(multi_turn_library, tmp_path / "native", server, "ap-agent", "acebench")
    assert finished.code == 0, finished.stderr
    assert_upstreams_user(user_requests_since(server, before))
    agent = next(r.body for r in server.chat_requests("ap-agent") if r.body)
    assert agent["messages"][1] == {"role": "user", "content": FIRST_LINE}
    # Both roles get the API models' defaults (temperature 0.001, top_p 1, max_tokens 1000), no seed, no tool_choice.
    assert sampling_of(agent) == UPSTREAM_SAMPLING
    assert [sampling_of(body) for body in user_requests_since(server, before)] == [UPSTREAM_SAMPLING] * len(
        user_requests_since(server, before)
    )


def test_the_text_setting_sends_upstreams_agent_and_user_byte_for_byte(
    multi_turn_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    before = len(server.chat_requests("ap-user"))
    finished = run(
        multi_turn_library, tmp_path / "text", server, "ap-text-agent", "acebench-text", "--agent", "acebench-text"
    )
    assert finished.code == 0, finished.stderr
    assert_upstreams_user(user_requests_since(server, before))
    system, template = AGENT_PROMPTS["multi_turn"]
    first = next(r.body for r in server.chat_requests("ap-text-agent") if r.body)
    assert first["messages"] == [
        {"role": "system", "content": system + "You run a phone."},
        {"role": "user", "content": template.format(functions=str(FUNCTIONS), history=f"user:{FIRST_LINE}\n")},
    ]
    assert "tools" not in first
    assert sampling_of(first) == UPSTREAM_SAMPLING


def test_envscalers_preset_keeps_its_own_prompts(
    multi_turn_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    before = len(server.chat_requests("ap-user"))
    finished = run(multi_turn_library, tmp_path / "paper", server, "ap-paper-agent", "acebench-envscaler")
    assert finished.code == 0, finished.stderr
    bodies = user_requests_since(server, before)
    messages = bodies[0]["messages"]
    assert messages[0]["content"].startswith("You play a user who talks to an agent.")
    assert messages[1] == {"role": "user", "content": "Is there anything you need help with today?"}
    assert bodies[1]["messages"][2] == {"role": "assistant", "content": FIRST_LINE}


def test_a_library_imported_before_the_user_prompt_was_stored_is_refused_with_one_line(
    multi_turn_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    old = tmp_path / "old"
    shutil.copytree(multi_turn_library, old)
    for scenarios in (old / "scenarios").glob("*.jsonl"):
        records = [orjson.loads(line) for line in scenarios.read_bytes().splitlines() if line.strip()]
        for record in records:
            del record["provenance"]["details"][DETAILS_KEY]
        scenarios.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    before = len(server.chat_requests())
    finished = run(old, tmp_path / "run", server, "ap-agent", "acebench")
    assert finished.code == 2, finished.stderr
    lines = [line for line in finished.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "re-import it with `harness import acebench`" in lines[0]
    assert len(server.chat_requests()) == before  # no model was called
