"""The mock OpenAI-compatible server replaying the seed library, and the alias file that points ``harness`` at it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.library import load_library
from tests.doubles.mock_openai import MockOpenAIServer

LIBRARY = load_library()


def register_scenarios(server: MockOpenAIServer) -> None:
    """The mock model replays each scenario's reference actions (found by the task text in the messages)."""
    for scenario in LIBRARY.scenarios:
        server.register_replay(scenario.task, [a.model_dump() for a in scenario.reference_actions])
        user_key = scenario.user_profile.goal if scenario.user_profile else scenario.task
        server.register_user(user_key, [scenario.task])


def alias_file(path: Path, base_url: str, *, model: str = "hosted_vllm/replay", key_env: str | None = None) -> Path:
    lines = ["[aliases.mock-agent]", f'model = "{model}"', f'api_base = "{base_url}"']
    if key_env:
        lines.append(f'api_key_env = "{key_env}"')
    path.write_text("\n".join(lines) + "\n")
    return path


@contextmanager
def serving_mock() -> Iterator[MockOpenAIServer]:
    """The mock server in a background thread, replaying every seed scenario's reference actions."""
    server = MockOpenAIServer(record_bodies=False)
    register_scenarios(server)
    with server.running_in_thread():
        yield server
