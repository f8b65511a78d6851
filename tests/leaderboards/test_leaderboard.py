"""Leaderboards on hand-built run folders: known answers, refusal to mix environment sets, reports, CLI."""

from __future__ import annotations

import io
import json
import re
import warnings
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from harness.cli.leaderboard import register
from harness.library import load_library, write_seed_layout
from harness.schema import Check, DatasetRef, Environment, Scenario, TerminationReason
from leaderboards import (
    DatasetMismatchError,
    LeaderboardRow,
    build_leaderboard,
    render_trajectory_html,
    write_leaderboard,
)
from leaderboards.page import episode_file_name
from leaderboards.report_md import md_cell
from leaderboards.terminal import trajectory_view
from tests.support.conftest_hub import hub, hub_server, repo_id  # noqa: F401  (fixtures)
from tests.support.leaderboard_runs import REV1, make_trajectory, write_run, write_sample_runs

INFRA = TerminationReason.INFRA_ERROR


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_sample_runs(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def report_dir(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    write_leaderboard(build_leaderboard([runs["b"], runs["a"]]), out, title="Seed leaderboard")
    return out


def test_rows_have_known_answers(runs: dict[str, Path]) -> None:
    leaderboard = build_leaderboard([runs["b"], runs["a"]])
    [table] = leaderboard.tables
    assert [row.model for row in table.rows] == ["model-a", "model-b"]
    assert [row.rank for row in table.rows] == [1, 2]
    a, b = table.rows
    assert a.episodes == 9 and a.scored == 8 and a.infra_errors == 1
    assert a.mean_state_reward == pytest.approx(5.5 / 8)
    assert a.success_rate == pytest.approx(5 / 8)
    assert a.pass_hat_k == pytest.approx({1: 2.5 / 4, 2: 2 / 4})
    assert table.domains == ["airline", "retail"]
    assert a.per_domain == pytest.approx({"airline": 0.5, "retail": 3.5 / 4})
    assert table.modes == ["conv", "nonconv"]
    assert a.per_mode == pytest.approx({"conv": 1.0, "nonconv": 3.5 / 6})
    assert a.mean_cost_usd == pytest.approx(0.02)
    assert a.mean_tokens == pytest.approx(120)
    assert a.terminations == {"agent_done": 8, "infra_error": 1}
    assert b.mean_state_reward == pytest.approx((2 + 6 * 0.25) / 8)
    assert b.pass_hat_k == pytest.approx({1: 0.25, 2: 0.25})
    assert b.infra_errors == 0
    assert (a.dataset_source, a.dataset_revision, a.dataset_fingerprint) == ("handmade-set", "rev1", "a" * 16)
    assert a.runs == ["run-a"] and b.runs == ["run-b"]
    assert "user=user-sim" in a.settings
    assert table.warnings == [], "both rows cover the same scenarios"


def test_failures_point_at_the_worst_environment(runs: dict[str, Path]) -> None:
    leaderboard = build_leaderboard([runs["a"]])
    [failures] = leaderboard.tables[0].failures
    assert failures.run_id == "run-a"
    worst = failures.environments[0]
    assert worst.environment_id == "airline_booking"
    assert (worst.scored, worst.failures) == (4, 2)
    [scenario] = worst.scenarios
    assert (scenario.scenario_id, scenario.mode, scenario.failures, scenario.scored) == (
        "s3",
        "nonconv",
        2,
        2,
    )
    assert scenario.example_episode_id == "model-a-s3-nonconv-0"
    assert scenario.failed_checks == ["c0", "c1", "c2", "c3"]
    assert scenario.example_episode_id in leaderboard.episodes


def test_different_revisions_are_never_merged(runs: dict[str, Path]) -> None:
    with pytest.raises(DatasetMismatchError) as caught:
        build_leaderboard([runs["a"], runs["b"], runs["c"]])
    message = str(caught.value)
    for name in ("run-a", "run-b", "run-c", "@rev1", "@rev2", "--split-by-dataset"):
        assert name in message

    split = build_leaderboard([runs["a"], runs["b"], runs["c"]], split_by_dataset=True)
    assert [t.dataset.revision for t in split.tables] == ["rev1", "rev2"]
    assert [len(t.rows) for t in split.tables] == [2, 1]
    assert split.tables[1].rows[0].rank == 1 and split.tables[1].rows[0].dataset_revision == "rev2"


def test_same_source_different_fingerprint_is_refused(tmp_path: Path) -> None:
    one = write_run(tmp_path / "one", [make_trajectory("x")], dataset=DatasetRef(source="d", fingerprint="1"))
    two = write_run(tmp_path / "two", [make_trajectory("y")], dataset=DatasetRef(source="d", fingerprint="2"))
    with pytest.raises(DatasetMismatchError, match="one"):
        build_leaderboard([one, two])


def test_runs_on_one_set_merge_and_later_runs_win(tmp_path: Path) -> None:
    first = write_run(tmp_path / "first", [make_trajectory("e1", state_reward=0.0, success=False)], dataset=REV1)
    second = write_run(
        tmp_path / "second",
        [make_trajectory("e1", state_reward=1.0), make_trajectory("e2", scenario_id="s2", state_reward=0.5)],
        dataset=REV1,
    )
    [row] = build_leaderboard([first, second]).rows
    assert row.episodes == 2
    assert row.mean_state_reward == pytest.approx(0.75)
    assert row.runs == ["second"], "e1 of the later run replaced the earlier one"


def test_coverage_difference_is_reported(tmp_path: Path) -> None:
    full = write_run(tmp_path / "full", [make_trajectory("a1"), make_trajectory("a2", scenario_id="s2")], dataset=REV1)
    partial = write_run(tmp_path / "partial", [make_trajectory("b1", model="model-b")], dataset=REV1)
    [table] = build_leaderboard([full, partial]).tables
    [warning] = table.warnings
    assert "different sets of scenarios" in warning and "1/2" in warning


SHOP_CODE = """class Shop:
    def __init__(self, init_config: dict):
        self.orders = init_config.get("orders", {})

    def get_order(self, order_id: str) -> dict:
        \"\"\"Look an order up.\"\"\"
        return {"success": True, "data": self.orders.get(order_id)}
"""


def _shop_library(folder: Path) -> str:
    """A one-environment library in the seed layout; returns its fingerprint."""
    environment = Environment(id="shop_x", name="Shop", domain="e-commerce", class_name="Shop", code=SHOP_CODE)
    scenario = Scenario(
        id="s1",
        environment_id="shop_x",
        initial_state={"orders": {}},
        task="Cancel order O-7 <now>.",
        checks=[Check(id=f"c{i}", description=f"Order O-7 is cancelled (part {i})", source="") for i in range(4)],
    )
    write_seed_layout([environment], [scenario], folder)
    return load_library(folder).source.fingerprint or ""


def test_domain_comes_from_manifest_then_library_then_prefix(tmp_path: Path) -> None:
    library = tmp_path / "library"
    fingerprint = _shop_library(library)
    trajectories = [
        make_trajectory("1", environment_id="shop_x", state_reward=0.5, success=False),
        make_trajectory("2", environment_id="clinic_y", scenario_id="s2"),
        make_trajectory("3", environment_id="bank-z", scenario_id="s3"),
    ]
    run = write_run(
        tmp_path / "run",
        trajectories,
        dataset=DatasetRef(source=str(library), fingerprint=fingerprint),
        config={"environment_domains": {"clinic_y": "healthcare"}},
    )
    leaderboard = build_leaderboard([run])
    assert leaderboard.tables[0].domains == ["bank", "e-commerce", "healthcare"]

    # the failing example's page shows the task and what each check verifies
    scenario = leaderboard.episodes.scenario_of("1")
    assert scenario is not None and scenario.task == "Cancel order O-7 <now>."
    write_leaderboard(leaderboard, tmp_path / "out")
    page = (tmp_path / "out" / "episodes" / "1.html").read_text()
    assert "Cancel order O-7 &lt;now&gt;." in page and "Order O-7 is cancelled (part 3)" in page

    shown = CliRunner().invoke(_cli(), ["show", str(run), "--episode", "1"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "Cancel order O-7 <now>." in shown.output

    # a folder whose content changed since the run is not used
    changed = write_run(
        tmp_path / "changed", trajectories, dataset=DatasetRef(source=str(library), fingerprint="0" * 16)
    )
    stale = build_leaderboard([changed])
    assert stale.tables[0].domains == ["bank", "clinic", "shop"]
    assert [stale.episodes.scenario_of(episode) for episode in stale.episodes.ids()] == [None, None, None]


def test_written_files(report_dir: Path) -> None:
    rows = [LeaderboardRow.model_validate_json(line) for line in (report_dir / "leaderboard.jsonl").open()]
    assert [(r.rank, r.model) for r in rows] == [(1, "model-a"), (2, "model-b")]
    assert rows[0].pass_hat_k[2] == pytest.approx(0.5)

    markdown = (report_dir / "report.md").read_text()
    assert "| Rank | Model | Settings | Mean reward |" in markdown
    assert "pass^2" in markdown and "mode: conv" in markdown and "| domain: airline |" in markdown
    assert "| 1 | model-a |" in markdown and "| 0.688 |" in markdown
    assert "rev1" in markdown and "a" * 16 in markdown

    report = (report_dir / "report.html").read_text()
    assert report.count("data:image/png;base64,") == 4
    assert "<script" not in report
    links = re.findall(r'href="(episodes/[^"]+)"', report)
    assert links, "the failure list links to episode pages"
    for link in links:
        assert (report_dir / link).is_file()


def test_model_text_is_escaped_everywhere(report_dir: Path) -> None:
    pages = [report_dir / "report.html", *sorted((report_dir / "episodes").glob("*.html"))]
    assert len(pages) > 1
    for page in pages:
        text = page.read_text()
        assert "<script" not in text and "<img src=x" not in text, page
    episode = (report_dir / "episodes" / episode_file_name("model-a-s3-nonconv-0")).read_text()
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in episode
    assert "&lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in episode
    assert "Content-Security-Policy\" content=\"default-src 'none'" in episode


def test_episode_page_shows_checks_calls_observations_and_diffs() -> None:
    trajectory = make_trajectory("ep", state_reward=0.5, tool_calls=2, failing_check_error="KeyError: 'x'")
    page = render_trajectory_html(trajectory)
    assert page.count("FAILED") == 2 and page.count('class="pass">passed') == 2
    assert page.count("cancel_order") >= 2  # the call and its tool message; the identical second one collapses
    assert "repeated once more" in page
    assert "orders › O-1 › status" in page and "&quot;pending&quot;" in page
    assert "observation: " in page and ">ok<" in page
    assert "KeyError: &#x27;x&#x27;" in page
    assert "state reward 0.500 (2/4 checks)" in page


def test_unsafe_names_become_safe_files_and_cells() -> None:
    unsafe = episode_file_name("../../etc/passwd")
    assert "/" not in unsafe and not unsafe.startswith(".") and unsafe.endswith(".html")
    assert unsafe != episode_file_name("_.._etc_passwd") != episode_file_name(".._.._etc_passwd")
    assert episode_file_name("abc123") == "abc123.html"
    assert md_cell("a|b<script>\nc") == "a\\|b&lt;script&gt; c"


# ----------------------------------------------------------------------------------------------------- CLI


def _cli() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """Test root."""

    register(app)
    return app


def test_cli_build_refuses_and_splits(runs: dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    args = [
        "leaderboard",
        "build",
        str(runs["a"]),
        str(runs["b"]),
        str(runs["c"]),
        "--out",
        str(tmp_path / "o"),
    ]
    refused = runner.invoke(_cli(), args)
    assert refused.exit_code == 2
    assert "Refusing to merge" in refused.output and "run-c" in refused.output
    assert not (tmp_path / "o" / "leaderboard.jsonl").exists()

    split = runner.invoke(_cli(), [*args, "--split-by-dataset"], env={"COLUMNS": "200"})
    assert split.exit_code == 0, split.output
    assert "Leaderboard on handmade-set@rev1" in split.output and "Leaderboard on handmade-set@rev2" in split.output
    lines = (tmp_path / "o" / "leaderboard.jsonl").read_text().splitlines()
    assert len(lines) == 3
    assert "### Environment set handmade-set@rev2" in (tmp_path / "o" / "report.md").read_text()


def test_cli_show_run_and_episode(runs: dict[str, Path]) -> None:
    runner = CliRunner()
    summary = runner.invoke(_cli(), ["show", str(runs["a"])], env={"COLUMNS": "200"})
    assert summary.exit_code == 0, summary.output
    assert "run-a" in summary.output and "airline_booking" in summary.output
    assert "pass^2" in summary.output and "infra" in summary.output
    assert "model-a-s3-nonconv-0" in summary.output

    episode = runner.invoke(
        _cli(), ["show", str(runs["a"]), "--episode", "model-a-s3-nonconv-0"], env={"COLUMNS": "200"}
    )
    assert episode.exit_code == 0, episode.output
    assert "FAILED" in episode.output and "cancel_order" in episode.output
    assert '<script>alert("pwned")</script>' in episode.output, "shown as plain text, not interpreted"

    missing = runner.invoke(_cli(), ["show", str(runs["a"]), "--episode", "nope"])
    assert missing.exit_code == 2 and "no episode" in missing.output


def test_cli_publish_puts_rows_and_table_on_the_hub(
    runs: dict[str, Path],
    tmp_path: Path,
    hub,  # noqa: F811  (the Hub test server fixture)
    repo_id: str,  # noqa: F811
) -> None:
    import pyarrow.parquet as pq
    from huggingface_hub import HfApi

    from harness.hub import rows_to_records

    out = tmp_path / "board"
    runner = CliRunner()
    built = runner.invoke(_cli(), ["leaderboard", "build", str(runs["a"]), str(runs["b"]), "--out", str(out)])
    assert built.exit_code == 0, built.output
    published = runner.invoke(_cli(), ["leaderboard", "publish", str(out), "--repo", repo_id])
    assert published.exit_code == 0, published.output
    assert repo_id in published.output

    local_rows = [json.loads(line) for line in (out / "leaderboard.jsonl").read_text().splitlines()]
    api = HfApi()
    shards = sorted(f for f in api.list_repo_files(repo_id, repo_type="dataset") if f.startswith("data/leaderboard/"))
    assert shards and all(shard.endswith(".parquet") for shard in shards)
    hub_rows = rows_to_records(
        (
            row
            for shard in shards
            for row in pq.read_table(api.hf_hub_download(repo_id, shard, repo_type="dataset")).to_pylist()
        ),
        "leaderboard",
    )
    assert [LeaderboardRow.model_validate(r) for r in hub_rows] == [
        LeaderboardRow.model_validate(r) for r in local_rows
    ]
    assert [LeaderboardRow.model_validate(row).model for row in hub_rows] == ["model-a", "model-b"]
    card = Path(api.hf_hub_download(repo_id, "README.md", repo_type="dataset")).read_text()
    assert "| Rank | Model | Settings | Mean reward |" in card
    assert "| 1 | model-a |" in card

    again = runner.invoke(_cli(), ["leaderboard", "publish", str(out), "--repo", repo_id])
    assert again.exit_code == 0 and "no change" in again.output

    missing = runner.invoke(_cli(), ["leaderboard", "publish", str(tmp_path / "nothing"), "--repo", repo_id])
    assert missing.exit_code == 2 and "Cannot publish" in missing.output


def test_terminal_view_neutralises_control_characters_and_markup(tmp_path: Path) -> None:
    hostile = "\x1b[2J\x1b[31mred[/] [bold]loud[/bold]\x07"
    run = write_run(tmp_path / "run", [make_trajectory("ep", state_reward=0.5, assistant_text=hostile)])
    shown = CliRunner().invoke(_cli(), ["show", str(run), "--episode", "ep"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "\x1b" not in shown.output and "\x07" not in shown.output
    assert "red[/] [bold]loud[/bold]" in shown.output and "[2J" not in shown.output


def test_empty_and_all_error_runs_build_cleanly(tmp_path: Path) -> None:
    empty = write_run(tmp_path / "empty", [], run_id="empty", dataset=REV1)
    broken = write_run(
        tmp_path / "broken",
        [make_trajectory(f"x{i}", scenario_id=f"s{i}", termination=INFRA) for i in range(3)],
        run_id="broken",
        dataset=DatasetRef(source="other-set"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        split = build_leaderboard([empty, broken], split_by_dataset=True)
        write_leaderboard(split, tmp_path / "out")
    assert [len(table.rows) for table in split.tables] == [0, 1]
    [row] = split.tables[1].rows
    assert (row.episodes, row.scored, row.infra_errors, row.mean_state_reward) == (3, 0, 3, None)
    assert row.pass_hat_k == {}
    html = (tmp_path / "out" / "report.html").read_text()
    assert "These runs hold no episodes yet." in html
    # Nothing was scored or paid for: only the terminations plot says something; the others are skipped.
    assert html.count("data:image/png;base64,") == 1
    assert "| 1 | model-a |" in (tmp_path / "out" / "report.md").read_text()


def test_malformed_messages_still_render() -> None:
    trajectory = make_trajectory("odd")
    trajectory.messages.append(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "first part"}, {"type": "image_url"}],
            "tool_calls": ["not a call", {"function": "not a dict"}, {"id": 3}],
        }
    )
    trajectory.messages.append({"content": 5})
    page = render_trajectory_html(trajectory)
    assert "first part" in page and "image_url" in page
    buffer = io.StringIO()
    Console(file=buffer, width=120).print(*trajectory_view(trajectory))
    assert "first part" in buffer.getvalue()


def test_one_set_in_two_folders_is_one_set(tmp_path: Path) -> None:
    here = write_run(
        tmp_path / "here", [make_trajectory("x")], dataset=DatasetRef(source="/home/a/seed", fingerprint="same")
    )
    there = write_run(
        tmp_path / "there",
        [make_trajectory("y", model="model-b")],
        dataset=DatasetRef(source="org/seed", revision="abc", fingerprint="same"),
    )
    [table] = build_leaderboard([here, there]).tables
    assert len(table.rows) == 2
    unfingerprinted = write_run(tmp_path / "bare", [make_trajectory("z")], dataset=DatasetRef(source="org/seed"))
    with pytest.raises(DatasetMismatchError):
        build_leaderboard([there, unfingerprinted])


def test_runs_with_different_transports_step_limits_or_rules_are_never_one_row(tmp_path: Path) -> None:
    direct = write_run(tmp_path / "direct", [make_trajectory("d1"), make_trajectory("d2", scenario_id="s2")])
    over_mcp = write_run(
        tmp_path / "mcp",
        [make_trajectory("m1", state_reward=0.0), make_trajectory("m2", scenario_id="s2", state_reward=0.0)],
        config={"mcp": "http://127.0.0.1:8765/mcp"},
    )
    capped = write_run(tmp_path / "capped", [make_trajectory("c1")], config={"max_steps": 5})
    upstream = write_run(
        tmp_path / "upstream", [make_trajectory("u1", state_reward=0.0)], config={"rules": "envscaler"}
    )
    same_as_default = write_run(tmp_path / "default", [make_trajectory("h1")], config={"rules": "harness"})
    rows = build_leaderboard([direct, over_mcp, capped, upstream, same_as_default]).rows
    assert len(rows) == 4 and len({row.settings_id for row in rows}) == 4
    labels = {run: row.settings for row in rows for run in row.runs}
    assert "via MCP" in labels["mcp"] and "via MCP" not in labels["direct"]
    assert "max_steps=5" in labels["capped"]
    assert "rules=envscaler" in labels["upstream"] and "rules=" not in labels["direct"]
    assert {run: row.mean_state_reward for row in rows for run in row.runs} == {
        "direct": 1.0,
        "default": 1.0,
        "mcp": 0.0,
        "capped": 1.0,
        "upstream": 0.0,
    }
    assert sorted(next(row for row in rows if "direct" in row.runs).runs) == ["default", "direct"]


def test_pass_hat_k_counts_the_trials_of_one_run(tmp_path: Path) -> None:
    """Two runs of one setting with one trial each are two samples of pass^1, not two trials of a task."""
    first = write_run(tmp_path / "first", [make_trajectory("a", state_reward=1.0)])
    second = write_run(tmp_path / "second", [make_trajectory("b", state_reward=0.0)])
    [row] = build_leaderboard([first, second]).rows
    assert row.runs == ["first", "second"]
    assert row.pass_hat_k == {1: 0.5}
    trials = write_run(
        tmp_path / "trials", [make_trajectory("c", trial=0), make_trajectory("d", trial=1, state_reward=0.0)]
    )
    [row] = build_leaderboard([trials]).rows
    assert row.pass_hat_k == {1: 0.5, 2: 0.0}


def test_plots_that_would_say_nothing_are_skipped_and_intervals_are_shown(tmp_path: Path) -> None:
    free = [make_trajectory(f"e{i}", scenario_id=f"s{i}", cost_usd=0.0, state_reward=i % 2) for i in range(6)]
    run = write_run(tmp_path / "free", free)
    board = build_leaderboard([run])
    [row] = board.rows
    assert row.success_ci95 is not None and row.success_ci95[0] < 0.5 < row.success_ci95[1]
    assert row.reward_ci95 is not None and row.reward_ci95[0] < 0.5 < row.reward_ci95[1]
    write_leaderboard(board, tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text()
    assert "cost per episode against mean state reward" not in html  # every cost is 0
    assert "pass^k" not in html.split("<figure>", 1)[-1].split("</div>", 1)[0]  # one trial: no curve
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "Success 95% CI" in markdown and "%" in markdown.split("Success 95% CI", 1)[1]


def _scenario_with_reference() -> Scenario:
    from harness.schema import ReferenceAction

    return Scenario(
        id="s1",
        environment_id="retail_orders",
        initial_state={},
        task="Cancel order O-1.",
        checks=[
            Check(id=f"c{i}", description=f"check {i}", source="def check(a, b):\n    return True\n") for i in range(4)
        ],
        reference_actions=[
            ReferenceAction(name="cancel_order", arguments={"order_id": "O-1"}),
            ReferenceAction(name="notify_customer", arguments={"order_id": "O-1"}),
        ],
    )


def test_episode_page_shows_reference_actions_beside_calls_and_collapses_repeats() -> None:
    html = render_trajectory_html(make_trajectory("rep", tool_calls=4), _scenario_with_reference())
    assert html.count('class="call"') == 1  # four identical calls with identical results, shown once
    assert "repeated 3 more times" in html
    assert "Steps not shown" not in html
    reference = html.split('<table class="reference">', 1)[1].split("</table>", 1)[0]
    assert reference.count("<tr>") == 5  # header + max(2 reference actions, 4 calls)
    assert reference.count(">same<") == 1 and reference.count(">differs<") == 1
    assert "notify_customer" in reference


def test_checks_of_an_unscored_episode_are_not_evaluated_rather_than_failed() -> None:
    trajectory = make_trajectory("infra", termination=TerminationReason.INFRA_ERROR)
    html = render_trajectory_html(trajectory, _scenario_with_reference())
    assert html.count("not evaluated") == 4 and "FAILED" not in html
    assert "infra_error: sandbox worker died" in html


def test_show_is_readable_at_80_columns(runs: dict[str, Path]) -> None:
    """The real CLI in an 80-column terminal: every number is printed whole, nothing squeezed to "…"."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", "show", str(runs["a"])],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(root), "COLUMNS": "80", "TERM": "xterm"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.stdout
    for header in ("success", "pass^1", "pass^2", "tok/ep", "cost/ep"):
        assert header in result.stdout
    assert "62.5%" in result.stdout and "0.688" in result.stdout  # the run's overall success and mean reward


def test_a_guard_whose_gate_fails_is_not_evaluated_rather_than_failed() -> None:
    checks = {  # id: (description, gate)
        "c0": ("The order is cancelled.", None),
        "c1": ("Nothing else changed.", "c0"),
        "c2": ("The refund went out.", "c3"),
        "c3": ("The customer was refunded.", None),
    }
    scenario = _scenario_with_reference().model_copy(
        update={
            "checks": [
                Check(id=cid, description=text, source="def check(a, b):\n    return True\n", gate=gate)
                for cid, (text, gate) in checks.items()
            ]
        }
    )
    trajectory = make_trajectory("gated", state_reward=0.25)  # c0 passes, c1-c3 fail
    html = render_trajectory_html(trajectory, scenario)
    assert html.count("not evaluated (c3 does not hold)") == 1, "c2's gate c3 failed"
    assert html.count("FAILED") == 2, "c1 (its gate c0 holds) and c3 fail as themselves"
    assert "The refund went out. Counted only once &#x27;c3&#x27; holds." in html, "the page states the gate"
    buffer = io.StringIO()
    Console(file=buffer, width=200, color_system=None).print(*trajectory_view(trajectory, scenario))
    text = buffer.getvalue()
    assert text.count("not evaluated (c3 does not hold)") == 1 and text.count("FAILED") == 2
    assert "Nothing else changed. Counted only once 'c0' holds." in text


def test_a_guard_is_known_by_its_gate_field_not_by_its_wording() -> None:
    """A description that merely reads like a gate does not make a check a guard; the field does."""
    scenario = _scenario_with_reference().model_copy(
        update={
            "checks": [
                Check(id="c0", description="The order is cancelled.", source="def check(a, b):\n    return True\n"),
                Check(
                    id="c1",
                    description="Counted only once 'c3' holds, says the note it left.",
                    source="def check(a, b):\n    return True\n",
                ),
                Check(id="c2", description="x", source="def check(a, b):\n    return True\n"),
                Check(id="c3", description="y", source="def check(a, b):\n    return True\n"),
            ]
        }
    )
    assert [check.gate for check in scenario.checks] == [None, None, None, None]
    html = render_trajectory_html(make_trajectory("worded", state_reward=0.25), scenario)
    assert "not evaluated" not in html and html.count("FAILED") == 3
