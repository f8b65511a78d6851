"""The ``harness`` command line as a package: ``harness run``'s flags are RunConfig's user-facing fields (one
flag each, the field's description as help), every refusal is one line with status 2, and Ctrl-C while the
models are probed is one line with status 130."""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import Any

import pytest
import typer

from harness.cli import app
from harness.cli.config_flags import flag_for, user_facing_fields
from harness.run.config import RunConfig
from tests.doubles.seed_replay import alias_file
from tests.support.cli_process import finish, harness, start_cli


def run_command() -> Any:
    """The click command typer builds for ``harness run`` (typer bundles its own click)."""
    return typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]


def long_flags(command: Any) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    for parameter in command.params:
        if parameter.param_type_name == "option":
            for name in parameter.opts:
                if name.startswith("--") and name != "--help":
                    flags[name] = parameter
    return flags


def test_every_user_facing_field_has_exactly_one_run_flag_and_every_flag_a_field() -> None:
    flags = long_flags(run_command())
    fields = user_facing_fields(RunConfig)
    expected = {flag_for(name, field) for name, field in fields.items()}
    assert set(flags) == expected
    assert len({id(option) for option in flags.values()}) == len(fields)
    assert "system_prompt_version" not in fields and "--system-prompt-version" not in flags
    assert "--agent" in flags and "--agent-kind" not in flags


def test_each_flag_shows_its_field_description_as_help() -> None:
    finished = harness(["run", "--help"], env={"COLUMNS": "400"})
    assert finished.code == 0
    help_text = " ".join(finished.stdout.split())
    for name, field in user_facing_fields(RunConfig).items():
        option = long_flags(run_command())[flag_for(name, field)]
        assert option.help == field.description
        assert " ".join(str(field.description).split()) in help_text


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["run", "--trials", "0"], "--trials"),  # a config field's constraint (pydantic)
        (["run", "--rules", "nosuch"], "--rules 'nosuch'"),  # a check of the command
        (["show", "/nonexistent-run"], "Cannot read the run"),  # a refusal of another command group
        (["synth", "report", "/nonexistent-folder"], "is not a folder"),
        (["serve", "nosuch-env"], "no environment 'nosuch-env'"),
    ],
)
def test_bad_input_is_one_line_and_status_2(args: list[str], fragment: str) -> None:
    finished = harness(args)
    assert finished.code == 2, finished.stderr
    assert len(finished.stderr_lines) == 1, finished.stderr
    assert finished.stderr_lines[0].startswith("error:") and fragment in finished.stderr_lines[0]
    assert "Traceback" not in finished.stderr


def test_debug_adds_the_traceback_to_a_refusal() -> None:
    finished = harness(["--debug", "show", "/nonexistent-run"])
    assert finished.code == 2
    assert "Traceback" in finished.stderr and "Cannot read the run" in finished.stderr


def test_ctrl_c_while_models_are_probed_is_one_line_and_status_130(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts connections, never answers
        port = silent.getsockname()[1]
        aliases = alias_file(tmp_path / "models.toml", f"http://127.0.0.1:{port}/v1")
        process = start_cli(
            ["run", "--model", "mock-agent", "--limit", "1", "--out", str(tmp_path / "run"), "--workers", "1"],
            env={"HARNESS_MODELS_FILE": str(aliases)},
        )
        silent.settimeout(600)
        connection, _ = silent.accept()  # the probe of the model is in flight
        with connection:
            process.send_signal(signal.SIGINT)
            finished = finish(process)
    assert finished.code == 130, finished.stderr
    assert len(finished.stderr_lines) == 1, finished.stderr
    assert "stopped by SIGINT" in finished.stderr_lines[0] and "Traceback" not in finished.stderr
    assert not (tmp_path / "run" / "results.jsonl").exists()
