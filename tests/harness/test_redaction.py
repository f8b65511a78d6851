"""Secrets the harness knows never reach results, stderr or logs: canaries planted in each place."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.llm import AliasTable, LLMClient, ModelSettings, RequestRejected, RetryPolicy
from harness.llm.aliases import AliasEntry
from harness.redact import REDACTED, redact, redact_known, register_secret
from tests.doubles.mock_openai import Fault, MockOpenAIServer
from tests.doubles.seed_replay import alias_file, serving_mock
from tests.support.cli_process import harness

CANARY = "canary-0f9e8d7c6b5a"  # matches no key-shaped pattern: only knowing the value can catch it


@pytest.fixture
def mock_server() -> Iterator[MockOpenAIServer]:
    with serving_mock() as server:
        yield server


def test_values_of_variables_an_alias_names_are_redacted_wherever_they_appear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_FIRST_VALUE", CANARY + "-alias")
    assert CANARY + "-alias" in redact(f"echoed {CANARY}-alias"), "not known before an alias names it"
    LLMClient(aliases=AliasTable({"m": AliasEntry(model="hosted_vllm/x", api_key_env="LAB_FIRST_VALUE")}, environ={}))
    assert redact(f"echoed {CANARY}-alias back") == f"echoed {REDACTED} back"
    assert redact_known(f'{{"detail": "{CANARY}-alias"}}') == f'{{"detail": "{REDACTED}"}}'


def test_keys_passed_in_and_the_hf_token_are_redacted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    register_secret(CANARY + "-passed")
    assert CANARY not in redact(f"key was {CANARY}-passed")
    monkeypatch.setenv("HF_TOKEN", CANARY + "-hf-env")
    assert CANARY not in redact(f"token {CANARY}-hf-env")
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    (tmp_path / "token").write_text(CANARY + "-hf-file\n")
    assert redact_known(f"from the login file: {CANARY}-hf-file") == f"from the login file: {REDACTED}"


@pytest.mark.parametrize(
    "text",
    [
        "GET https://api.example.com/v1/models?key=unknown-9a8b7c6d&alt=json",
        "https://host/v1?api_key=unknown-9a8b7c6d",
        '{"api_key": "unknown-9a8b7c6d", "model": "x"}',
        "{'access_token': 'unknown-9a8b7c6d'}",
        "Authorization: Bearer unknown-9a8b7c6d",
        "password=unknown-9a8b7c6d",
        "using sk-unknown9a8b7c6d and hf_unknown9a8b7c6d",
    ],
)
def test_key_like_fields_are_redacted_even_when_their_value_is_not_known(text: str) -> None:
    cleaned = redact(text)
    assert "9a8b7c6d" not in cleaned and REDACTED in cleaned


def test_a_secret_set_or_changed_after_earlier_redactions_is_still_redacted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "token"))
    assert redact_known("nothing secret here") == "nothing secret here"
    monkeypatch.setenv("SERVICE_TOKEN", "first-canary-value")
    assert redact_known("sent first-canary-value") == f"sent {REDACTED}"
    monkeypatch.setenv("SERVICE_TOKEN", "second-canary-value")
    assert redact_known("sent second-canary-value") == f"sent {REDACTED}"
    (tmp_path / "token").write_text("file-token-canary")
    assert redact_known("sent file-token-canary") == f"sent {REDACTED}"
    monkeypatch.delenv("SERVICE_TOKEN")
    assert redact_known("sent first-canary-value") == "sent first-canary-value"


def test_ordinary_values_survive() -> None:
    text = "max_tokens=1000 for order O-1001 (tool get_order, key: order_id)"
    assert redact(text) == text


async def test_an_error_body_that_echoes_the_key_is_redacted_in_the_error_and_logs(
    mock_server: MockOpenAIServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("LAB_ACCESS_VALUE", CANARY + "-http")
    aliases = AliasTable(
        {
            "mock-agent": AliasEntry(
                model="hosted_vllm/replay", api_base=mock_server.base_url, api_key_env="LAB_ACCESS_VALUE"
            )
        },
        environ={},
    )
    mock_server.inject(Fault(kind="echo_key", times=1, status=500), Fault(kind="echo_key", times=1))
    caplog.set_level(logging.DEBUG)
    async with LLMClient(aliases=aliases, retry=RetryPolicy(initial_backoff=0.01, jitter=0)) as client:
        with pytest.raises(RequestRejected) as raised:
            await client.chat(ModelSettings(model="mock-agent"), [{"role": "user", "content": "hi"}])
    assert "Incorrect API key provided" in str(raised.value)
    assert CANARY not in str(raised.value)
    retried = [r.getMessage() for r in caplog.records if "retry 1" in r.getMessage()]
    assert retried and "Incorrect API key provided: [redacted]" in retried[0]
    assert all(CANARY not in record.getMessage() for record in caplog.records)


def test_the_cli_keeps_an_echoed_key_out_of_results_stdout_stderr_and_debug_logs(
    mock_server: MockOpenAIServer, tmp_path: Path
) -> None:
    models = alias_file(tmp_path / "models.toml", mock_server.base_url, key_env="LAB_ACCESS_VALUE")
    env = {"HARNESS_MODELS_FILE": str(models), "LAB_ACCESS_VALUE": CANARY + "-cli"}
    mock_server.inject(Fault(kind="echo_key", times=None))
    out = tmp_path / "run"
    result = harness(["--verbose", "run", "--model", "mock-agent", "--limit", "2", "--out", str(out)], env)
    assert result.code == 1, result.stdout + result.stderr
    assert "Incorrect API key provided: [redacted]" in result.stdout  # the cause, printed once
    assert CANARY not in result.stdout
    assert CANARY not in result.stderr
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all("Incorrect API key provided: [redacted]" in line for line in lines)
    assert all(CANARY not in line for line in lines)
    for path in out.iterdir():
        assert CANARY not in path.read_text(), path
