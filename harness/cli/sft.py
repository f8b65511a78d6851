"""``harness sft``: roll out a teacher, keep the episodes that reach the bar, export SFT datasets.

The rollout flags are generated from :class:`harness.run.config.RunConfig`, as ``harness run``'s are, with the
teacher's names (``--teacher`` sets the model, ``--attempts`` the trials) and defaults; the export flags are
this command's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from harness.cli.config_flags import ConfigFlags
from harness.cli.errors import RefusingCommand
from harness.cli.run import check_choices, check_rules, rerun_command, run_with_progress
from harness.console import console, outside
from harness.run.config import RunConfig

SFT_FLAGS = ConfigFlags(
    RunConfig,
    include=(
        "model",
        "envs",
        "mode",
        "trials",
        "agent_kind",
        "user_model",
        "judge_model",
        "env",
        "scenario",
        "limit",
        "concurrency",
        "max_requests",
        "rpm",
        "tpm",
        "temperature",
        "rules",
        "include_invalid",
        "seed",
        "cache_dir",
        "allow_weak_sandbox",
        "timeout",
        "skip_bad_records",
        "ray",
        "cost_limit",
    ),
    flags={"model": "teacher", "trials": "attempts"},
    defaults={"model": ..., "mode": "both", "trials": 2, "temperature": 0.7},
    help={
        "model": "The teacher model (alias or litellm string).",
        "trials": "Teacher attempts per scenario and mode.",
        "user_model": "Simulated user's model (default: the teacher).",
        "temperature": "Teacher sampling temperature.",
        "cost_limit": "Start no teacher episode once the spend recorded for the rollouts reaches this many USD "
        "(episodes in flight finish; the export covers what was recorded). Rerun with a higher limit to continue.",
    },
)


@SFT_FLAGS.options
def sft(
    out: Annotated[Path, typer.Option(help="Output folder: rollouts/ plus the SFT files.")],
    min_reward: Annotated[
        float | None, typer.Option(help="Keep episodes with state reward ≥ this (default: success only).")
    ] = None,
    allow_errors: Annotated[bool, typer.Option(help="Keep episodes that recorded agent errors.")] = False,
    keep_reasoning: Annotated[bool, typer.Option(help="Keep reasoning content in assistant turns.")] = True,
    split_turns: Annotated[bool, typer.Option(help="Also write one ShareGPT sample per assistant turn.")] = False,
    **values: Any,
) -> None:
    """Roll out a teacher (resumable), keep the episodes that reach the bar, export SFT datasets."""
    from harness.cli.progress import print_exit_line
    from harness.results.metrics import open_results
    from harness.results.sft import SelectionRule, export

    settings = SFT_FLAGS.values(values)
    check_choices(
        mode=settings["mode"],
        agent=settings["agent_kind"],
        models={"--teacher": settings["model"], "--user-model": settings["user_model"]},
    )
    check_rules(settings["rules"])
    rollouts = out / "rollouts"
    config = SFT_FLAGS.build(**settings, out=rollouts, resume=(rollouts / "manifest.json").exists(), retry_errors=True)
    outcome = run_with_progress(config)
    again = rerun_command(["--out", str(out)])
    if outcome.stopped_by is not None:
        raise typer.Exit(print_exit_line(console, outcome, {}, resume=again, retry=again))
    stats = export(
        open_results(outcome.run_dir / "results.jsonl"),
        out,
        rule=SelectionRule(min_reward=min_reward, allow_errors=allow_errors),
        keep_reasoning=keep_reasoning,
        split=split_turns,
    )
    table = Table(title=outside(f"SFT data in {out}", multiline=False))
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("teacher episodes", str(stats.episodes))
    table.add_row("kept", str(stats.kept))
    for reason, count in sorted(stats.dropped.items()):
        table.add_row(outside(f"dropped: {reason}"), str(count))
    for stem, count in stats.samples.items():
        table.add_row(outside(f"rows in {stem}.jsonl"), str(count))
    for label, figures in (("turns", stats.turns), ("tool calls", stats.tool_calls), ("tokens", stats.tokens)):
        if figures:
            table.add_row(f"{label} per sample (mean / max)", f"{figures['mean']:.1f} / {figures['max']:.0f}")
    console.print(table)
    raise typer.Exit(print_exit_line(console, outcome, {}, resume=again, retry=again))


def register(app: typer.Typer) -> None:
    """Add ``sft`` to the ``harness`` command."""
    app.command(cls=RefusingCommand)(sft)
