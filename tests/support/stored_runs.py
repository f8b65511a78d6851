"""Run folders made by the real command line against the mock model, for tests that read stored runs."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.doubles.seed_replay import alias_file, serving_mock
from tests.support.cli_process import harness


def lines_of(run_dir: Path) -> list[dict]:
    return [orjson.loads(line) for line in (run_dir / "results.jsonl").read_bytes().splitlines()]


def mock_model_run(folder: Path, scenarios: list[str], trials: int = 2) -> Path:
    """``harness run`` of ``scenarios`` in both modes: the mock agent replays each scenario's reference actions and
    the mock user says the task, then stops. Returns the run folder ``folder / "run"``."""
    with serving_mock() as server:
        models = alias_file(folder / "models.toml", server.base_url)
        with models.open("a") as aliases:
            aliases.write(f'[aliases.mock-user]\nmodel = "hosted_vllm/user"\napi_base = "{server.base_url}"\n')
        args = ["run", "--model", "mock-agent", "--user-model", "mock-user", "--mode", "both"]
        args += ["--trials", str(trials)]
        for scenario in scenarios:
            args += ["--scenario", scenario]
        finished = harness([*args, "--out", str(folder / "run")], env={"HARNESS_MODELS_FILE": str(models)})
    assert finished.code == 0, finished.stderr
    return folder / "run"
