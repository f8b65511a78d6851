"""Hostile inputs around the jail: sources that break parsers, ids that try to escape a folder, Hub code on a
machine without every layer."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from harness.library import write_seed_layout
from harness.names import UnsafeIdentifier, is_safe_id
from harness.sandbox import JailSpec, WeakSandbox, find_problems
from harness.schema import Environment, Scenario
from harness.toolspec import ToolDerivationError, derive_tools
from tests.support.cli_process import harness_cli

DEEP_EXPRESSION = "x = " + "+".join(["1"] * 200_000) + "\n"
HOSTILE_SOURCES = {
    "200k-term expression": DEEP_EXPRESSION,
    "deep nesting": "x = " + "(" * 100_000 + ")" * 100_000,
    "10 MB": "# " + "a" * 10_000_000,
    "NUL byte": "class A:\n    pass\x00\n",
    "lone surrogate": "x = '\ud800'\n",
    "not Python": "class (:\n",
}


@pytest.mark.parametrize("source", list(HOSTILE_SOURCES.values()), ids=list(HOSTILE_SOURCES))
def test_the_lint_reports_and_never_raises(source):
    problems = find_problems(source)
    assert problems and all(isinstance(p, str) and len(p) < 300 for p in problems)
    with pytest.raises(ToolDerivationError):
        derive_tools(source, "A")


def test_validate_reports_a_200k_term_expression_instead_of_crashing(tmp_path):
    environment = Environment(id="deep", name="Deep", class_name="Deep", code=DEEP_EXPRESSION, tools=[])
    scenario = Scenario(id="deep-1", environment_id="deep", initial_state={}, task="nothing")
    write_seed_layout([environment], [scenario], tmp_path / "library")
    result = harness_cli("validate", str(tmp_path / "library"), "--json")
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert not report["ok"]
    problems = " ".join(p for record in report["records"] for p in record["problems"])
    assert "nests too deeply" in problems


@pytest.mark.parametrize("bad", ["../../../x", "/etc/passwd", "a/b", "..", ".hidden", "", "x" * 200, "a\nb"])
def test_ids_that_would_escape_a_folder_are_refused(bad, tmp_path):
    assert not is_safe_id(bad)
    environment = Environment(id=bad, name="x", class_name="X", code="class X:\n    pass\n", tools=[])
    with pytest.raises(UnsafeIdentifier):
        write_seed_layout([environment], [], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_import_envscaler_refuses_a_traversing_env_id_and_writes_nothing_outside(tmp_path):
    code = 'class Shop:\n    def __init__(self, init_config):\n        self.items = {}\n\n    def ping(self) -> dict:\n        """Ping."""\n        return {\'success\': True}\n'
    records = [
        {"env_id": "../../../escaped", "env_class_name": "Shop", "env_class_code": code},
        {"env_id": "env_1_rl", "env_class_name": "Shop", "env_class_code": code},
    ]
    (tmp_path / "envs.json").write_bytes(orjson.dumps(records))
    out = tmp_path / "deep" / "er" / "out"
    result = harness_cli("import", "envscaler", "--environments", str(tmp_path / "envs.json"), "--out", str(out))
    assert "../../../escaped" in result.stdout + result.stderr
    assert not any(p.name.startswith("escaped") for p in tmp_path.rglob("*"))
    assert (out / "environments" / "env_1_rl.py").exists()


async def test_hub_code_needs_every_layer_unless_weak_is_allowed(monkeypatch):
    monkeypatch.setenv("HARNESS_SANDBOX_DISABLE", "seccomp")
    with pytest.raises(WeakSandbox, match="seccomp"):
        async with JailSpec(full_confinement=True).pool():
            pass
    async with JailSpec(full_confinement=False).pool() as pool:  # a local folder: runs, with a warning
        assert [layer["name"] for layer in pool.missing_layers] == ["seccomp"]


def test_run_refuses_hub_code_on_a_weak_sandbox_and_allows_it_when_asked(hub, repo_id, tmp_path):
    from harness.hub import build_library, upload_built
    from harness.library import load_library

    seed = load_library()
    upload_built(
        build_library([seed.environments["banking"]], seed.scenarios_for("banking")[:1], tmp_path / "b", repo_id)
    )
    weak = {"HARNESS_SANDBOX_DISABLE": "landlock"}
    refused = harness_cli("run", "--envs", repo_id, "--agent", "oracle", "--out", str(tmp_path / "r1"), env=weak)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--allow-weak-sandbox" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "r1" / "results.jsonl").exists()
    allowed = harness_cli(
        "run", "--envs", repo_id, "--agent", "oracle", "--out", str(tmp_path / "r2"), "--allow-weak-sandbox", env=weak
    )
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert len((tmp_path / "r2" / "results.jsonl").read_bytes().splitlines()) == 1
    local = harness_cli(
        "run",
        "--envs",
        str(Path("datasets/seed").resolve()),
        "--env",
        "banking",
        "--limit",
        "1",
        "--agent",
        "oracle",
        "--out",
        str(tmp_path / "r3"),
        env=weak,
    )
    assert local.returncode == 0, local.stdout + local.stderr
    assert "landlock" in local.stderr  # the warning names the missing layer
