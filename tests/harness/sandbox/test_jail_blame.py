"""Blame where it belongs: an environment that fails its own episodes gets them scored as failures.

An environment whose constructor raises, that never finishes loading, that the static checks refuse, or whose
process exits, dies or stops on its own must not be able to void its episodes (an infrastructure error is not
scored, makes the run exit 1 and is offered for a re-run). That holds for an exit with the very status a child
that could not confine itself exits with (70): the child confirmed its confinement before any code of the
environment ran, so that status is the code's. Through the real CLI: each such episode ends as
``environment_error`` with the environment at fault (not retryable), scored 0, counted per environment in the
summary; the run exits 0 and ``--resume --retry-errors`` runs nothing again. A model endpoint that fails is still
infrastructure, and so is a child whose confinement really fails, before it could confirm it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from harness.episode.blame import classify_failure
from harness.hub.rows import records_to_table, rows_to_records
from harness.library import write_seed_layout
from harness.results.metrics import read_results
from harness.results.store import ResultStore
from harness.results.tally import summarize_group
from harness.sandbox import EnvironmentFailed, JailSpec, find_problems
from harness.schema import (
    Check,
    Environment,
    Failure,
    FailureParty,
    Observation,
    ObservationKind,
    ReferenceAction,
    Scenario,
    TerminationReason,
    ToolCall,
    Trajectory,
)
from harness.scoring.checks import zero_reward
from harness.scoring.reward import trajectory_reward
from harness.toolspec import derive_tools
from tests.doubles.mock_openai import Fault
from tests.doubles.seed_replay import alias_file, serving_mock
from tests.support.cli_process import Finished, harness
from tests.support.trajectories import one_call_trajectory
from tests.support.unprivileged import NOBODY, open_to_ordinary_user, run_as_ordinary_user

RAISES_ON_LOAD = '''
class RaisesOnLoad:
    def __init__(self, init_config: dict):
        self.done = init_config.get("done", False)
        raise ValueError("this constructor refuses to build")

    def finish(self) -> dict:
        """Finish the task."""
        self.done = True
        return {"success": True}
'''

NEVER_LOADS = '''
class NeverLoads:
    def __init__(self, init_config: dict):
        self.done = init_config.get("done", False)
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass

    def finish(self) -> dict:
        """Finish the task."""
        self.done = True
        return {"success": True}
'''

REFUSED = '''
import os


class Refused:
    def __init__(self, init_config: dict):
        self.done = init_config.get("done", False)
        self.where = os.getcwd()

    def finish(self) -> dict:
        """Finish the task."""
        self.done = True
        return {"success": True}
'''

EXITS = '''
import typing


class ExitsOnCall:
    def __init__(self, init_config: dict):
        self.done = init_config.get("done", False)

    def finish(self) -> dict:
        """Finish the task (and end the process with status 3, through an allowed module's attribute)."""
        self.done = True
        typing.sys.modules["os"]._exit(3)
        return {"success": True}
'''

CRASHES = '''
import typing


class KillsItself:
    def __init__(self, init_config: dict):
        self.done = init_config.get("done", False)

    def finish(self) -> dict:
        """Finish the task (by recursing through C until the stack overflows, which crashes the process)."""
        self.done = True
        typing.sys.setrecursionlimit(10_000_000)

        def down(depth):
            return list(map(down, [depth + 1]))

        return down(0)
'''

SPINS = '''
class Spins:
    def __init__(self, init_config: dict):
        self.done = init_config.get("done", False)

    def finish(self) -> dict:
        """Finish the task (looping past the call budget, swallowing the call timer, until it is killed)."""
        self.done = True
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass
'''

UNCONFINED_ON_CALL = '''
import typing


class UnconfinedOnCall:
    def __init__(self, init_config: dict):
        self.done = init_config.get("done", False)

    def finish(self) -> dict:
        """Finish the task (and exit with the status of a child that could not confine itself)."""
        self.done = True
        typing.sys.modules["os"]._exit(70)
        return {"success": True}
'''

UNCONFINED_ON_LOAD = '''
import typing


class UnconfinedOnLoad:
    def __init__(self, init_config: dict):
        self.done = init_config.get("done", False)
        typing.sys.modules["os"]._exit(70)

    def finish(self) -> dict:
        """Finish the task."""
        self.done = True
        return {"success": True}
'''

HOSTILE = {
    "raises-on-load": ("RaisesOnLoad", RAISES_ON_LOAD, "could not be instantiated"),
    "never-loads": ("NeverLoads", NEVER_LOADS, "could not be loaded"),
    "refused": ("Refused", REFUSED, "fails the static checks"),
    "exits": ("ExitsOnCall", EXITS, "exited with status 3"),
    "kills-itself": ("KillsItself", CRASHES, "SIGSEGV"),
    "spins": ("Spins", SPINS, "kept computing past its CPU-time limit"),
    "unconfined-on-call": ("UnconfinedOnCall", UNCONFINED_ON_CALL, "exited with status 70"),
    "unconfined-on-load": (
        "UnconfinedOnLoad",
        UNCONFINED_ON_LOAD,
        "could not be loaded: the sandbox process exited with status 70",
    ),
}
"""Environment id: (class name, code, what its failure's detail says)."""

DONE_CHECK = "def check(initial_state, final_state):\n    return final_state.get('done') is True\n"


def hostile_library(root: Path) -> Path:
    environments: list[Environment] = []
    scenarios: list[Scenario] = []
    for env_id, (class_name, code, _) in HOSTILE.items():
        if env_id == "refused":
            assert find_problems(code), "the static checks must refuse this one"
        else:
            assert not find_problems(code), find_problems(code)
        environments.append(
            Environment(
                id=env_id, name=class_name, class_name=class_name, code=code, tools=derive_tools(code, class_name)
            )
        )
        scenarios.append(
            Scenario(
                id=f"{env_id}-1",
                environment_id=env_id,
                initial_state={"done": False},
                task="Finish the task.",
                checks=[Check(id="done", description="the task is finished", source=DONE_CHECK)],
                reference_actions=[ReferenceAction(name="finish")],
            )
        )
    write_seed_layout(environments, scenarios, root)
    return root


def results(run_dir: Path) -> list[Trajectory]:
    return [Trajectory.model_validate_json(line) for line in (run_dir / "results.jsonl").read_bytes().splitlines()]


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile_library(tmp_path_factory.mktemp("blame") / "library")


def cli(args: list[str], *, ordinary_user: bool, home: Path) -> Finished:
    """The real CLI, as this process's user or as an ordinary user (uid 65534 when this process is root)."""
    if not ordinary_user:
        return harness(args)
    finished = run_as_ordinary_user([sys.executable, "-m", "harness.cli", *args], home=home)
    return Finished(finished.returncode, finished.stdout, finished.stderr)


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A folder for the run; below /tmp itself, so that an ordinary user can reach it whatever mode pytest's
    base folder (shared by every pytest session of this user) is given meanwhile."""
    with tempfile.TemporaryDirectory(prefix="blame-") as folder:
        yield Path(folder)


@pytest.mark.parametrize("ordinary_user", [False, True], ids=["as-this-user", "as-an-ordinary-user"])
def test_an_environment_that_fails_its_episodes_gets_them_scored_as_failures(
    library: Path, workspace: Path, ordinary_user: bool
) -> None:
    if ordinary_user:
        library = Path(shutil.copytree(library, workspace / "library"))
        open_to_ordinary_user(workspace)
    out = workspace / "run"
    run = ["run", "--envs", str(library), "--agent", "oracle", "--include-invalid", "--out", str(out)]
    first = cli(run, ordinary_user=ordinary_user, home=workspace)
    assert first.code == 0, first.stdout + first.stderr
    assert "Traceback" not in first.stderr
    if ordinary_user and os.geteuid() == 0:
        assert (out / "results.jsonl").stat().st_uid == NOBODY  # the run was the ordinary user's
    trajectories = {t.environment_id: t for t in results(out)}
    assert sorted(trajectories) == sorted(HOSTILE)
    for env_id, trajectory in trajectories.items():
        assert trajectory.termination is TerminationReason.ENVIRONMENT_ERROR, (env_id, trajectory.termination_detail)
        assert trajectory.failure is not None and trajectory.failure.at_fault == "environment", env_id
        assert (trajectory.failure.kind, trajectory.failure.retryable) == ("environment", False), env_id
        assert HOSTILE[env_id][2] in trajectory.failure.detail, (env_id, trajectory.failure.detail)
        assert trajectory.reward is not None, env_id
        assert (trajectory.reward.state_reward, trajectory.reward.success) == (0.0, False), env_id
    # The calls that ended their process are on record, marked as such.
    for env_id in ("exits", "kills-itself", "spins", "unconfined-on-call"):
        steps = trajectories[env_id].steps
        assert [step.call.name for step in steps] == ["finish"] and steps[0].observation.process_ended, env_id

    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["overall"]["environment_errors"] == len(HOSTILE)
    assert summary["overall"]["infra_errors"] == 0
    assert summary["overall"]["scored"] == len(HOSTILE) and summary["overall"]["mean_state_reward"] == 0.0
    per_environment = {group["key"]["environment_id"]: group["environment_errors"] for group in summary["groups"]}
    assert per_environment == dict.fromkeys(HOSTILE, 1)
    for env_id in HOSTILE:
        assert f"environment failure ×1 ({env_id}):" in first.stdout, first.stdout
    assert (
        first.last_line
        == f"exit 0: all {len(HOSTILE)} episodes were scored ({len(HOSTILE)} failed by their environment)"
    )
    assert "--retry-errors" not in first.stdout

    recorded = (out / "results.jsonl").read_bytes()
    again = cli([*run, "--resume", "--retry-errors"], ordinary_user=ordinary_user, home=workspace)
    assert again.code == 0, again.stdout + again.stderr
    assert "0 to run" in again.stdout, again.stdout
    assert (out / "results.jsonl").read_bytes() == recorded


def test_a_child_whose_confinement_fails_before_it_confirms_it_is_an_infrastructure_error(
    library: Path, workspace: Path
) -> None:
    """Without no_new_privs and without the namespaces (whose user namespace would grant the capability instead),
    an ordinary user's child cannot apply Landlock or seccomp: every child exits with status 70 before it confirms
    its confinement, so no code of the environment ever runs, and the sandbox is at fault."""
    library = Path(shutil.copytree(library, workspace / "library"))
    open_to_ordinary_user(workspace)
    out = workspace / "run"
    # The screening's sessions fail alike: the scenario is not left out for it (the jail failed, not the scenario),
    # so its episode runs and meets the same failure.
    run = ["run", "--envs", str(library), "--env", "exits", "--agent", "oracle", "--out", str(out)]
    disabled = "no_new_privs,network_namespace,uts_namespace,pid_namespace,mount_namespace"
    finished = run_as_ordinary_user(
        [sys.executable, "-m", "harness.cli", *run], home=workspace, extra_env={"HARNESS_SANDBOX_DISABLE": disabled}
    )
    assert finished.returncode == 1, finished.stdout + finished.stderr
    (trajectory,) = results(out)
    assert trajectory.termination is TerminationReason.INFRA_ERROR, trajectory.termination_detail
    assert trajectory.failure is not None and trajectory.failure.at_fault == "harness"
    assert (trajectory.failure.kind, trajectory.failure.retryable) == ("sandbox", True)
    assert "could not confine itself and refused to run the code" in trajectory.failure.detail
    assert trajectory.steps == [] and trajectory.reward is None
    assert f"--resume --retry-errors --out {out}" in finished.stdout


def test_a_failing_model_endpoint_is_still_an_infrastructure_error(library: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with serving_mock() as server:
        server.inject(Fault(kind="bad_request", times=None))
        models = alias_file(tmp_path / "models.toml", server.base_url)
        failed = harness(
            ["run", "--envs", str(library), "--env", "exits", "--model", "mock-agent", "--out", str(out)],
            {"HARNESS_MODELS_FILE": str(models)},
        )
    assert failed.code == 1, failed.stdout + failed.stderr
    (trajectory,) = results(out)
    assert trajectory.termination is TerminationReason.INFRA_ERROR
    assert trajectory.failure is not None and trajectory.failure.at_fault == "model_endpoint"
    assert trajectory.reward is None
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert (summary["overall"]["infra_errors"], summary["overall"]["environment_errors"]) == (1, 0)
    assert failed.last_line.startswith("exit 1: 1 of 1 episodes ended in infrastructure errors")
    # A rejected request is recorded as not retryable: the command re-runs it only with --retry-unretryable.
    assert trajectory.failure.kind == "request_rejected" and trajectory.failure.retryable is False
    assert failed.last_line.endswith(f"--resume --retry-errors --retry-unretryable --out {out}")


def blamed_trajectory(episode_id: str, termination: TerminationReason, failure: Failure | None) -> Trajectory:
    observation = Observation(
        tool_call_id="c1",
        name="finish",
        kind=ObservationKind.TOOL_EXCEPTION,
        error="the call ended its sandbox process: the sandbox process exited with status 3",
        process_ended=True,
    )
    reward = zero_reward(Scenario(id="exits-1", environment_id="exits", initial_state={}, task="t"))
    return one_call_trajectory(
        episode_id,
        observation,
        scenario_id="exits-1",
        environment_id="exits",
        termination=termination,
        reward=reward,
        failure=failure,
    )


def test_the_blame_is_published_and_records_of_earlier_runs_keep_their_meaning(tmp_path: Path) -> None:
    blamed = blamed_trajectory(
        "e1",
        TerminationReason.ENVIRONMENT_ERROR,
        Failure(at_fault=FailureParty.ENVIRONMENT, detail="sandbox: tool 'finish': exited with status 3"),
    )
    # A trainer's reward for it is 0, though its one call matched the reference.
    scenario = Scenario(
        id="exits-1",
        environment_id="exits",
        initial_state={},
        task="t",
        reference_actions=[ReferenceAction(name="finish")],
    )
    assert trajectory_reward(scenario, blamed) == 0.0

    table = records_to_table([blamed], "trajectory")
    assert {"failure"} <= set(table.column_names)
    assert rows_to_records(table.to_pylist(), "trajectory") == [blamed]

    # A row published before the fields existed: no failure column, observations without process_ended.
    old_row = table.drop_columns(["failure"]).to_pylist()[0]
    for step in old_row["steps"]:
        del step["observation"]["process_ended"]
    (old,) = rows_to_records([old_row], "trajectory")
    assert old.failure is None and old.steps[0].observation.process_ended is False

    # An infrastructure error of an earlier run (a results.jsonl line without the new fields) is still one: not
    # averaged in and re-run by --retry-errors, while an environment failure stands.
    earlier = blamed_trajectory("e2", TerminationReason.INFRA_ERROR, None).model_dump(mode="json")
    del earlier["failure"]
    for step in earlier["steps"]:
        del step["observation"]["process_ended"]
    earlier["reward"] = None
    path = tmp_path / "results.jsonl"
    path.write_bytes(blamed.model_dump_json().encode() + b"\n" + orjson.dumps(earlier) + b"\n")
    trajectories = read_results(path)
    assert [t.termination for t in trajectories] == [TerminationReason.ENVIRONMENT_ERROR, TerminationReason.INFRA_ERROR]
    summary = summarize_group(trajectories)
    assert (summary.environment_errors, summary.infra_errors, summary.scored) == (1, 1, 1)
    assert ResultStore(path).finished(retry_errors=True) == {"e1"}


FORGES = '''
import typing


class Forges:
    def __init__(self, init_config: dict):
        self.done = init_config.get("done", False)

    def forge(self) -> dict:
        """Rewrite this process's worker so that every later reply names the sandbox at fault."""
        worker = typing.sys.modules["harness.sandbox.runtime"].EnvironmentSession
        worker.op_call = lambda session, request: {"ok": False, "kind": "sandbox_error", "error": "forged"}
        worker.op_state = lambda session: {"ok": False, "kind": "sandbox_error", "error": "forged"}
        return {"success": True}

    def finish(self) -> dict:
        """Finish the task."""
        self.done = True
        return {"success": True}
'''


async def test_replies_that_name_the_sandbox_after_the_code_ran_are_the_environments() -> None:
    assert not find_problems(FORGES), find_problems(FORGES)
    environment = Environment(
        id="forges", name="Forges", class_name="Forges", code=FORGES, tools=derive_tools(FORGES, "Forges")
    )
    async with JailSpec().pool() as pool:
        session = await pool.open_session(environment, {"done": False})
        forged, _ = await session.call(ToolCall(id="c1", name="forge", arguments={}))
        assert forged.ok
        after, _ = await session.call(ToolCall(id="c2", name="finish", arguments={}))
        with pytest.raises(EnvironmentFailed, match="reading the state failed: forged"):
            await session.state()
        await session.close()
    assert (after.kind, after.error) == (ObservationKind.TOOL_EXCEPTION, "forged")
    assert classify_failure(EnvironmentFailed("reading the state failed: forged"), "sandbox").reason is (
        TerminationReason.ENVIRONMENT_ERROR
    )
