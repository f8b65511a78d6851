"""τ-bench's prompts under ``--rules taubench`` are upstream's bytes: the import reads the user simulator's prompt
from the checkout's syntax tree (an f-string with a conditional display, built in a method), the run renders it
for each task and sends it, with the wiki as the agent's whole system prompt and the user's opening line; a
prompt method shaped otherwise is refused at import, a scenario imported before the prompt was stored is refused
at run, each with one line. Real CLI, real jail, the recording mock OpenAI server."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.benchmarks.taubench.user_prompt import DETAILS_KEY, UserPromptTemplate
from harness.library import load_library
from tests.doubles.mock_openai import MockOpenAIServer, ReplayPolicy, SimulatedUserPolicy
from tests.harness.benchmarks.test_taubench_import import shop_library, taubench_checkout  # noqa: F401  (fixtures)
from tests.harness.benchmarks.test_taubench_rules import run_taubench
from tests.support.cli_process import harness_cli
from tests.support.taubench_checkout import (
    INSTRUCTIONS,
    TOOL_INFOS,
    USER_OPENING,
    USER_PROMPT_HEAD,
    USER_PROMPT_TAIL,
    WIKI,
)
from tests.support.taubench_checkout import user_prompt as expected_user_prompt

OPENING = "Hi, what would three lamps cost?"
PRICE_TASK = "taubench-shop-test-1"


@pytest.fixture(scope="module")
def server() -> Iterator[MockOpenAIServer]:
    mock = MockOpenAIServer()
    mock.set_policy("tbp-user", SimulatedUserPolicy(turns=[OPENING]))
    mock.set_policy(
        "tbp-agent",
        ReplayPolicy(actions=[{"name": "get_item", "arguments": {"item_id": "lamp"}}], final_text="59.97 in all."),
    )
    with mock.running_in_thread():
        yield mock


def test_the_import_reads_the_user_prompt_from_the_checkouts_syntax_tree(shop_library: Path) -> None:  # noqa: F811
    library = load_library(shop_library)
    scenarios = sorted(library.scenarios, key=lambda s: s.id)
    assert [s.task for s in scenarios] == INSTRUCTIONS
    for scenario in scenarios:
        template = UserPromptTemplate.model_validate(scenario.provenance.details[DETAILS_KEY])
        assert template.version == 1
        assert template.source == "tau_bench/envs/user.py:LLMUserSimulationEnv.build_system_prompt"
        assert (template.head, template.before, template.after) == (USER_PROMPT_HEAD, "\n\nYour errand: ", "\n")
        assert (template.absent, template.tail) == ("\n(no errand today)", USER_PROMPT_TAIL)
        assert template.opening == USER_OPENING
        # Rendered as upstream's method renders it, compared with the text written out by hand.
        assert template.render(scenario.task) == expected_user_prompt(scenario.task)


@pytest.mark.parametrize(
    "change",
    [
        # The prompt built with str.format instead of an f-string.
        ('return f"""You play', 'return """You play'),
        # A condition other than `instruction is not None`.
        ("if instruction is not None", "if instruction"),
        # The method renamed: no build_system_prompt left.
        ("def build_system_prompt", "def build_prompt"),
        # No literal opening line in reset.
        ('"content": "Welcome to the shop, what can I do for you?"', '"content": instruction'),
    ],
)
def test_a_prompt_method_shaped_otherwise_is_refused_with_one_line(
    taubench_checkout: Path,  # noqa: F811
    tmp_path: Path,
    change: tuple[str, str],
) -> None:
    checkout = tmp_path / "tau-bench"
    shutil.copytree(taubench_checkout, checkout)
    user_py = checkout / "tau_bench" / "envs" / "user.py"
    text = user_py.read_text()
    assert change[0] in text
    user_py.write_text(text.replace(change[0], change[1]))
    out = tmp_path / "lib"
    result = harness_cli("import", "taubench", "--source", str(checkout), "--domain", "shop", "--out", str(out))
    assert result.returncode == 2, result.stderr
    problems = [line for line in result.stderr.splitlines() if "user.py" in line]
    assert len(problems) == 1 and "Traceback" not in result.stderr
    assert not out.exists()


SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "tool_choice", "n", "stop")


def sampling_of(body: dict[str, Any]) -> dict[str, Any]:
    """The sampling parameters a request carries."""
    return {key: body[key] for key in SAMPLING_KEYS if key in body}


def test_the_run_sends_upstreams_prompts_byte_for_byte(
    shop_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    finished = run_taubench(shop_library, out, server, "--scenario", PRICE_TASK, agent="tbp-agent", user="tbp-user")
    assert finished.code == 0, finished.stderr
    instruction = INSTRUCTIONS[1]
    user_requests = [r.body for r in server.chat_requests("tbp-user") if r.body]
    # The user simulator: upstream's prompt for this task, then the agent's fixed opening line, then the agent's
    # replies as "user" and its own as "assistant".
    first = user_requests[0]["messages"]
    assert first == [
        {"role": "system", "content": expected_user_prompt(instruction)},
        {"role": "user", "content": USER_OPENING},
    ]
    later = user_requests[1]["messages"]
    assert later[:3] == [*first, {"role": "assistant", "content": OPENING}]
    assert later[3] == {"role": "user", "content": "59.97 in all."}
    # The agent: the wiki is the whole system prompt; the user's first reply is its first message; upstream's tool
    # schemas.
    agent_requests = [r.body for r in server.chat_requests("tbp-agent") if r.body]
    first_agent = agent_requests[0]
    assert first_agent["messages"] == [{"role": "system", "content": WIKI}, {"role": "user", "content": OPENING}]
    assert first_agent["tools"] == TOOL_INFOS
    second_agent = agent_requests[1]["messages"]
    assert [m["role"] for m in second_agent] == ["system", "user", "assistant", "tool"]
    # Sampling as upstream's runner sends it: the agent run.py's temperature 0.0 only; the user simulator nothing.
    assert [sampling_of(body) for body in agent_requests] == [{"temperature": 0.0}] * len(agent_requests)
    assert [sampling_of(body) for body in user_requests] == [{}] * len(user_requests)
    assert second_agent[3]["name"] == "get_item" and second_agent[3]["tool_call_id"]


def test_a_scenario_imported_before_the_prompt_was_stored_is_refused_with_one_line(
    shop_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    old = tmp_path / "old"
    shutil.copytree(shop_library, old)
    scenarios = old / "scenarios" / "taubench-shop.jsonl"
    records = [orjson.loads(line) for line in scenarios.read_bytes().splitlines() if line.strip()]
    for record in records:
        del record["provenance"]["details"][DETAILS_KEY]
    scenarios.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    server.set_policy("tbp-old-agent", ReplayPolicy(actions=[], final_text="Hello."))
    finished = run_taubench(old, tmp_path / "run", server, agent="tbp-old-agent", user="tbp-user")
    assert finished.code == 2, finished.stderr
    lines = [line for line in finished.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "re-import it with `harness import taubench`" in lines[0]
    # Refused before any episode: the agent's model was never called.
    assert server.chat_requests("tbp-old-agent") == []
