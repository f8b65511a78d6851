"""What ``harness show --episode`` prints of an episode's LLM judge: for each judged check, what the judge was
asked (each message of the request), what it answered, and the verdicts the benchmark's evaluator read from it."""

from __future__ import annotations

from rich.console import RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from harness.console import terminal_text
from harness.schema import JudgeRecord, Scenario

MAX_JUDGE_TEXT = 4000
"""Characters shown of one message of a judge's request or of its reply."""


def _clean(value: object, limit: int = MAX_JUDGE_TEXT) -> str:
    return terminal_text(value, limit=limit)


def judge_views(record: JudgeRecord, scenario: Scenario | None) -> list[RenderableType]:
    """One panel per judged check: the request, the reply and the verdicts."""
    asked = {check.id: check.description for check in scenario.judged_checks} if scenario else {}
    settings = ", ".join(f"{key} {value}" for key, value in sorted(record.settings.items()) if value is not None)
    judge = f"{record.judge_model or 'replayed'}" + (f" ({settings})" if settings else "")
    views: list[RenderableType] = []
    for exchange in record.exchanges:
        body = Text()
        body.append(f"judge: {_clean(judge, 300)}", style="bold")
        if exchange.model:
            body.append(f" → {_clean(exchange.model, 200)}")
        if exchange.replayed:
            body.append(" · replayed from the stored reply", style="italic")
        elif exchange.cached:
            body.append(" · from the response cache", style="italic")
        if asked.get(exchange.check_id):
            body.append(f"\nchecks: {_clean(asked[exchange.check_id], 500)}")
        for message in exchange.request:
            body.append(f"\n\nasked ({_clean(message.get('role', '?'), 40)}):\n", style="bold cyan")
            body.append(_clean(message.get("content") or ""))
        body.append("\n\nanswered:\n", style="bold green")
        if exchange.reply is None:
            body.append("no reply", style="red")
        else:
            body.append(_clean(exchange.reply))
        if exchange.unreadable:
            body.append(f"\n\nunreadable: {_clean(exchange.unreadable, 500)}", style="bold red")
        views.append(Panel(body, title=Text(f"Judge: {_clean(exchange.check_id, 200)}"), title_align="left"))
        if exchange.verdicts:
            table = Table(title=f"Verdicts of {_clean(exchange.check_id, 200)}")
            for column in ("item", "verdict", "reason"):
                table.add_column(column)
            for verdict in exchange.verdicts:
                shown = Text("holds", style="green") if verdict.holds else Text("DOES NOT HOLD", style="bold red")
                table.add_row(_clean(verdict.item, 500), shown, _clean(verdict.reason or "", 500))
            views.append(table)
    return views
