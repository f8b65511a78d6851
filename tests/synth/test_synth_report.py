"""``harness synth report DIR`` on real pipeline output, through the CLI in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.library import load_library
from harness.llm import LLMClient
from harness.sandbox import JailSpec
from synth.pipeline import synthesize_environments
from synth.scenarios import ScenarioSynthesisConfig, synthesize_scenarios
from tests.doubles.scripted_scenarios import ScriptedScenarioWriter
from tests.doubles.scripted_scenarios import scripted as scripted_writer
from tests.synth.test_synth_envs import config, scripted


def report(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "synth", "report", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_environment_report_shows_stages_reasons_coverage_and_cost(tmp_path: Path) -> None:
    _model, kept_model = scripted()
    _narrow, narrow_model = scripted(method_faults={"cancel_permit": "buggy"}, narrow_tester=True)
    (tmp_path / "kept").mkdir()
    (tmp_path / "narrow").mkdir()
    async with JailSpec(workers=2).pool() as pool:
        await synthesize_environments(config(tmp_path / "kept", kept_model, rounds=12), pool=pool)
        await synthesize_environments(config(tmp_path / "narrow", narrow_model, rounds=9, repairs=0), pool=pool)

    kept = report(tmp_path / "kept" / "out")
    assert kept.returncode == 0, kept.stderr
    text = (tmp_path / "kept" / "out" / "synth_report.md").read_text()
    assert "## Acceptance per stage" in text and "| assessment | 1 | 1 | 100% |" in text
    assert "## Coverage per tool: parking_permits" in text and "| cancel_permit |" in text
    assert "| skeleton paper, per environment | $1.02 |" in text
    assert "| accepted on first assessment / after repair | 100% / 100% |" in text
    assert "| EnvFactory, first try / after revision | about 55% / about 80% |" in text
    assert (tmp_path / "kept" / "out" / "synth_report.html").read_text().startswith("<!doctype html>")

    narrow = report(tmp_path / "narrow" / "out")
    assert narrow.returncode == 0, narrow.stderr
    text = (tmp_path / "narrow" / "out" / "synth_report.md").read_text()
    assert "| assessment | 1 | 0 | 0% |" in text
    assert "| assessment | 1 | assessment incomplete" in text
    assert "| no | 2/4 | " in text and "cancel_permit" in text
    assert "n/a (none accepted)" in text


async def test_scenario_report_shows_gates_duplicates_and_cost(tmp_path: Path) -> None:
    writer = scripted_writer(ScriptedScenarioWriter(["retail_orders"]))
    out = tmp_path / "scen"
    client = LLMClient(cache_dir=None)
    try:
        async with JailSpec(workers=2).pool() as pool:
            await synthesize_scenarios(
                [load_library().environments["retail_orders"]],
                ScenarioSynthesisConfig(model=writer, per_env=3, probes=0, dedup_similarity=None),
                out,
                client=client,
                pool=pool,
            )
    finally:
        await client.aclose()
    completed = report(out)
    assert completed.returncode == 0, completed.stderr
    assert "per accepted item" in completed.stdout
    text = (out / "synth_report.md").read_text()
    assert "| state_loads | 3 | 3 | 100% |" in text
    assert "| duplicates dropped | 0 |" in text and "| duplicates found by | text |" in text
    assert "| skeleton paper, per scenario | $0.06 |" in text
    assert "| mean solve rate | n/a (no solver rollouts) |" in text


def test_a_folder_without_synthesis_output_is_one_clear_error(tmp_path: Path) -> None:
    completed = report(tmp_path)
    assert completed.returncode == 2
    assert "holds no synthesis output" in completed.stderr and "Traceback" not in completed.stderr
    missing = report(tmp_path / "nowhere")
    assert missing.returncode == 2 and "is not a folder" in missing.stderr
