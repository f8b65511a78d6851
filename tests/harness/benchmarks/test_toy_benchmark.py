"""A benchmark the project has never seen, written as its own package in a temporary folder and installed there
offline (``pip install --no-deps --no-build-isolation --target``): with nothing of the project changed, the real
``harness`` command imports its source, runs the library under the rules it recommends, and exports the run in its
format. A package whose entry point is broken is one warning line, and every other command still works."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from tests.support.cli_process import REPO, Finished, harness

TOY_PACKAGE = '''
"""Counters that must reach a target: a benchmark in its own package."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.registry import (
    Benchmark,
    CliOption,
    ExportCommand,
    ExportResult,
    ImportCommand,
    ImportNote,
    ImportResult,
    RunSettings,
    SourceRefused,
)
from harness.rules.profiles import HARNESS_RULES, RulesPrompts
from harness.schema import Check, Environment, Provenance, ReferenceAction, Scenario
from harness.toolspec import derive_tools

CODE = """
class Counter:
    def __init__(self, init_config: dict):
        self.value = init_config.get("value", 0)

    def add(self, amount: int) -> dict:
        \\"\\"\\"Add to the counter.

        Args:
            amount: How much to add.
        \\"\\"\\"
        self.value += amount
        return {"success": True, "data": {"value": self.value}}
"""

TOY_PROMPT = "TOY RULES: bring the counter to its target with add, then say done."


def agent_prompt(environment: Environment, mode: str, scenario: Scenario | None, rules: Any) -> str:
    return TOY_PROMPT


TOY_RULES = HARNESS_RULES.model_copy(
    update={
        "name": "toy",
        "composite_reward": False,
        "reward_decimals": 2,
        "required_source": "toybench",
        "prompts": RulesPrompts(agent=agent_prompt),
    }
)


def import_counters(options: dict[str, Any]) -> ImportResult:
    try:
        counters = json.loads(Path(options["source"]).read_text())["counters"]
    except (OSError, ValueError, KeyError) as exc:
        raise SourceRefused(f"{options['source']} is not a toy release: {exc}") from exc
    environment = Environment(
        id="toy-counter",
        name="Counter",
        class_name="Counter",
        code=CODE,
        tools=derive_tools(CODE, "Counter"),
        provenance=Provenance(source="toybench"),
    )
    scenarios = []
    notes = []
    for counter in counters:
        if counter["target"] <= counter["start"]:
            notes.append(ImportNote(label="skipped", text=f"{counter['id']}: its target is already reached"))
            continue
        scenarios.append(
            Scenario(
                id=f"toy-{counter['id']}",
                environment_id=environment.id,
                initial_state={"value": counter["start"]},
                task=f"Bring the counter to {counter['target']}.",
                checks=[
                    Check(
                        id="target",
                        description="the counter is at its target",
                        source=f"def check(initial_state, final_state):\\n    return final_state['value'] == {counter['target']}\\n",
                    ),
                    Check(
                        id="moved",
                        description="the counter moved",
                        source="def check(initial_state, final_state):\\n    return final_state['value'] != initial_state['value']\\n",
                    ),
                ],
                reference_actions=[ReferenceAction(name="add", arguments={"amount": counter["target"] - counter["start"]})],
                provenance=Provenance(source="toybench", upstream_id=counter["id"]),
            )
        )
    return ImportResult(
        environments=[environment],
        scenarios=scenarios,
        notes=notes,
        summary=[f"toy release: {len(scenarios)} counters -> {options['out']}"],
    )


def export_rewards(options: dict[str, Any]) -> ExportResult:
    from harness.results.metrics import load_run

    manifest, trajectories = load_run(options["run_dir"])
    out = Path(options["out"])
    with out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["counter", "reward"])
        for trajectory in sorted(trajectories, key=lambda t: t.scenario_id):
            reward = trajectory.reward.state_reward if trajectory.reward is not None else ""
            writer.writerow([trajectory.scenario_id.removeprefix("toy-"), reward])
    return ExportResult(lines=[f"wrote {len(trajectories)} rows to {out} (rules {manifest.config.get('rules')})"])


def recommend(environments: Sequence[Environment]) -> RunSettings:
    return RunSettings(rules=TOY_RULES.name, max_steps=6)


BENCHMARK = Benchmark(
    name="toybench",
    title="Toy counters",
    profiles=(TOY_RULES,),
    importer=ImportCommand(
        help="Import a toy release of counters.",
        options=(
            CliOption(name="source", type="path", required=True, help="The release (JSON)."),
            CliOption(name="out", type="path", required=True, help="The library folder to write."),
        ),
        run=import_counters,
    ),
    exporter=ExportCommand(
        help="A run as the toy's CSV of rewards.",
        options=(
            CliOption(name="run_dir", type="path", argument=True, required=True, help="A run folder."),
            CliOption(name="out", type="path", required=True, help="The CSV file to write."),
        ),
        run=export_rewards,
    ),
    recommend=recommend,
    tasks_as_released=True,
)
'''

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1.0"

[project.entry-points."harness.benchmarks"]
{entry}

[tool.setuptools]
packages = ["{package}"]
"""


def install(tmp_path: Path, name: str, package: str, entry: str, source: str) -> Path:
    """Write the package ``package`` (one module, ``benchmark.py``) with the entry point ``entry``, and pip-install
    it offline into a folder of its own, which is returned."""
    project = tmp_path / f"{name}-src"
    (project / package).mkdir(parents=True)
    (project / "pyproject.toml").write_text(PYPROJECT.format(name=name, entry=entry, package=package))
    (project / package / "__init__.py").write_text("")
    (project / package / "benchmark.py").write_text(textwrap.dedent(source))
    target = tmp_path / f"{name}-site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet"]
    done = subprocess.run([*pip, "--target", str(target), str(project)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return target


def with_site(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": f"{site}:{REPO}"}


@pytest.fixture(scope="module")
def toy_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(
        tmp_path_factory.mktemp("toy"), "toybench", "toybench", 'toybench = "toybench.benchmark:BENCHMARK"', TOY_PACKAGE
    )


def toy_release(folder: Path) -> Path:
    release = folder / "release.json"
    counters = [
        {"id": "a", "start": 1, "target": 4},
        {"id": "b", "start": 0, "target": 2},
        {"id": "c", "start": 5, "target": 5},
    ]
    release.write_text(json.dumps({"counters": counters}))
    return release


def ok(finished: Finished) -> Finished:
    assert finished.code == 0, finished.stdout + finished.stderr
    assert "Traceback" not in finished.stderr
    return finished


def test_the_toy_benchmark_imports_runs_under_its_recommended_rules_and_exports(toy_site: Path, tmp_path: Path) -> None:
    env = with_site(toy_site)
    help_text = ok(harness(["run", "--help"], env={**env, "COLUMNS": "400"})).stdout
    assert "toy" in " ".join(help_text.split()).split("Episode rules:")[1].split("(default")[0]
    assert "toybench" in ok(harness(["import", "--help"], env=env)).stdout

    library = tmp_path / "lib"
    imported = ok(
        harness(["import", "toybench", "--source", str(toy_release(tmp_path)), "--out", str(library)], env=env)
    )
    assert imported.stdout.strip() == f"toy release: 2 counters -> {library}"
    assert imported.stderr_lines == ["skipped c: its target is already reached"]
    assert sorted(p.name for p in (library / "scenarios").iterdir()) == ["toy-counter.jsonl"]

    run = tmp_path / "run"
    ran = ok(harness(["run", "--envs", str(library), "--agent", "oracle", "--out", str(run)], env=env))
    header = " ".join(ran.stdout.split())
    assert "rules toy (from the library)" in header and "step limit 6 (from the library)" in header, ran.stdout
    manifest = orjson.loads((run / "manifest.json").read_bytes())
    assert (manifest["config"]["rules"], manifest["config"]["mode"], manifest["config"]["max_steps"]) == (
        "toy",
        "nonconv",
        6,
    )
    results = {r["scenario_id"]: r for r in map(orjson.loads, (run / "results.jsonl").read_bytes().splitlines())}
    assert sorted(results) == ["toy-a", "toy-b"]
    for result in results.values():
        assert result["messages"][0] == {
            "role": "system",
            "content": "TOY RULES: bring the counter to its target with add, then say done.",
        }
        # The toy rules score the checks' pass rate, not the project's composite.
        assert result["reward"]["state_reward"] == 1.0 and result["reward"]["composite"] == 1.0
        assert result["reward"]["trajectory_reward"] is None

    out = tmp_path / "rewards.csv"
    exported = ok(harness(["export", "toybench", str(run), "--out", str(out)], env=env))
    assert exported.stdout.strip() == f"wrote 2 rows to {out} (rules toy)"
    with out.open() as handle:
        assert list(csv.reader(handle)) == [["counter", "reward"], ["a", "1.0"], ["b", "1.0"]]


def test_the_toy_rules_are_refused_off_its_imports_and_unknown_without_the_package(
    toy_site: Path, tmp_path: Path
) -> None:
    refused = harness(
        ["run", "--rules", "toy", "--agent", "oracle", "--limit", "1", "--out", str(tmp_path / "r")],
        env=with_site(toy_site),
    )
    assert refused.code == 2 and len(refused.stderr_lines) == 1, refused.stderr
    assert "--rules toy runs only environments imported with `harness import toybench`" in refused.stderr
    unknown = harness(["run", "--rules", "toy", "--limit", "1", "--out", str(tmp_path / "u")])
    assert unknown.code == 2 and len(unknown.stderr_lines) == 1, unknown.stderr
    assert "--rules 'toy': use one of harness," in unknown.stderr
    missing = harness(["import", "toybench", "--source", "x", "--out", str(tmp_path / "m")])
    assert missing.code == 2 and "toybench" in missing.stderr
    assert not (tmp_path / "r").exists() and not (tmp_path / "u").exists() and not (tmp_path / "m").exists()


BROKEN = """
raise RuntimeError("this package is broken")
"""


def test_a_broken_benchmark_package_is_one_warning_and_the_others_still_work(toy_site: Path, tmp_path: Path) -> None:
    broken = install(tmp_path, "brokenbench", "brokenbench", 'brokenbench = "brokenbench.benchmark:BENCHMARK"', BROKEN)
    env = {"PYTHONPATH": f"{broken}:{toy_site}:{REPO}"}
    listed = harness(["import", "--help"], env=env)
    assert listed.code == 0, listed.stderr
    assert "toybench" in listed.stdout and "tau2" in listed.stdout and "brokenbench" not in listed.stdout
    (warning,) = listed.stderr_lines
    assert (
        "benchmark 'brokenbench' (brokenbench.benchmark:BENCHMARK) does not load: RuntimeError: this package is broken"
        in warning
    )
    library = tmp_path / "lib"
    imported = harness(["import", "toybench", "--source", str(toy_release(tmp_path)), "--out", str(library)], env=env)
    assert imported.code == 0, imported.stderr
    assert (library / "environments" / "toy-counter.py").is_file()
