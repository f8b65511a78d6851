"""In `harness synth`, `--concurrency` counts units in flight and `--max-requests` the model requests in flight:
each is its own setting, driven through the real CLI with a model that counts the requests it is answering."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from harness.cli.synth_scenarios import register
from tests.doubles.scripted_scenarios import ScriptedScenarioWriter, scripted


class CountingWriter:
    """The scripted scenario writer, answering after a short wait, that remembers the most requests it was
    answering at once."""

    def __init__(self) -> None:
        self.writer = ScriptedScenarioWriter(["retail_orders"])
        self.in_flight = 0
        self.peak = 0

    async def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0.05)  # long enough for the other units in flight to send theirs
            return self.writer(request)
        finally:
            self.in_flight -= 1


def synthesize(out: Path, *options: str) -> tuple[CountingWriter, dict[str, Any]]:
    app = typer.Typer()
    synth_app = typer.Typer()
    register(synth_app)
    app.add_typer(synth_app, name="synth")
    model = CountingWriter()
    arguments = ["synth", "scenarios", "--env", "retail_orders", "--per-env", "4", "--model", scripted(model)]
    arguments += ["--out", str(out), "--probes", "0", "--workers", "1", "--no-cache", *options]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    return model, json.loads((out / "report.json").read_text())


def test_max_requests_caps_the_requests_while_concurrency_keeps_its_units_in_flight(tmp_path: Path) -> None:
    capped, report = synthesize(tmp_path / "capped", "--concurrency", "4", "--max-requests", "1")
    assert report["attempted"] == 4
    assert capped.peak == 1

    uncapped, report = synthesize(tmp_path / "uncapped", "--concurrency", "4", "--max-requests", "4")
    assert report["attempted"] == 4
    assert uncapped.peak > 1  # four units in flight each had a request out at once


def test_one_unit_at_a_time_whatever_the_request_cap(tmp_path: Path) -> None:
    model, report = synthesize(tmp_path / "serial", "--concurrency", "1", "--max-requests", "4")
    assert report["attempted"] == 4
    assert model.peak == 1
