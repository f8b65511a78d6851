"""``harness synth report DIR``: one page (Markdown and self-contained HTML) on what a synthesis run kept and why.

It reads what the pipelines wrote, never a model: for ``harness synth envs`` output (``costs.json``,
``rejected.jsonl``, ``environments/``) the acceptance per stage, the rejection reasons, the assessment coverage
per tool and the cost per accepted environment; for ``harness synth scenarios`` / ``queries`` output
(``attempts.jsonl``, ``report.json``) the acceptance per gate, the rejection reasons, the solve rates of the
rollouts, the duplicates and the cost per accepted scenario. Costs are set against the skeleton paper's published
figures ($1.02 per environment, $0.06 per scenario).
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field

from synth.costs import PUBLISHED_USD_PER_ENVIRONMENT, CostReport
from synth.scenarios import PUBLISHED_USD_PER_SCENARIO, Journal, SynthesisReport, summarize_attempts

REASON_CHARS = 160
ENV_STAGES = ("discovery", "planning", "modeling", "assessment", "repair", "validation", "infrastructure")


class ReportError(ValueError):
    """The folder holds no synthesis output this report can read."""


class StageRow(BaseModel):
    stage: str
    evaluated: int
    passed: int


class ReasonRow(BaseModel):
    stage: str
    count: int
    example: str


class CoverageRow(BaseModel):
    environment_id: str
    accepted: bool
    tools: int
    exercised: int
    unexercised: list[str] = Field(default_factory=list)
    per_tool: dict[str, dict[str, int]] = Field(default_factory=dict)


class SynthReportPage(BaseModel):
    kind: Literal["environments", "scenarios"]
    folder: str
    attempted: int
    accepted: int
    stages: list[StageRow]
    reasons: list[ReasonRow]
    coverage: list[CoverageRow] = Field(default_factory=list)
    solve_rates: list[float] = Field(default_factory=list)
    difficulty: dict[str, int] = Field(default_factory=dict)
    rollout_verified: int = 0
    accepted_without_repair: int | None = None
    duplicates: int | None = None
    dedup: str = ""
    price_model: str
    usd_total: float
    usd_per_accepted: float | None
    reference_usd: float
    reference_label: str


def _reasons(rows: list[tuple[str, str]]) -> list[ReasonRow]:
    """Rejections grouped by stage and by the reason's first clause, most frequent first."""
    grouped: Counter[tuple[str, str]] = Counter()
    for stage, reason in rows:
        grouped[(stage, reason.split(":")[0][:REASON_CHARS])] += 1
    examples = {(stage, reason.split(":")[0][:REASON_CHARS]): reason for stage, reason in rows}
    return [
        ReasonRow(stage=stage, count=count, example=examples[(stage, head)][:REASON_CHARS])
        for (stage, head), count in grouped.most_common()
    ]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _environments_page(folder: Path) -> SynthReportPage:
    costs = CostReport.model_validate(orjson.loads((folder / "costs.json").read_bytes()))
    rejected = _read_jsonl(folder / "rejected.jsonl")
    accepted = [
        json.loads(path.read_text())
        for path in sorted((folder / "environments").glob("*.json"))
        if (folder / "environments").exists()
    ]
    attempted = len(accepted) + len(rejected)
    stopped = Counter(r["stage"] for r in rejected)
    stages, remaining = [], attempted
    for stage in ENV_STAGES:
        if stage in ("discovery", "infrastructure") and not stopped[stage]:
            continue
        stages.append(StageRow(stage=stage, evaluated=remaining, passed=remaining - stopped[stage]))
        remaining -= stopped[stage]
    coverage = []
    first_try = sum(
        1
        for meta in accepted
        if not ((meta.get("provenance") or {}).get("details") or {}).get("assessment", {}).get("repairs_used")
    )
    for meta in accepted:
        reports = ((meta.get("provenance") or {}).get("details") or {}).get("assessment", {}).get("reports") or []
        last = reports[-1] if reports else {}
        per_tool = last.get("coverage") or {}
        coverage.append(
            CoverageRow(
                environment_id=meta.get("id", "?"),
                accepted=True,
                tools=len(per_tool),
                exercised=sum(1 for entry in per_tool.values() if entry.get("total")),
                unexercised=[name for name, entry in per_tool.items() if not entry.get("total")],
                per_tool={name: {k: int(v) for k, v in entry.items()} for name, entry in per_tool.items()},
            )
        )
    for rejection in rejected:
        summaries = (rejection.get("details") or {}).get("assessment") or []
        if summaries and "tools" in summaries[-1]:
            last = summaries[-1]
            coverage.append(
                CoverageRow(
                    environment_id=rejection.get("name") or rejection["theme_id"],
                    accepted=False,
                    tools=last["tools"],
                    exercised=last["tools_exercised"],
                    unexercised=last.get("unexercised", []),
                )
            )
    return SynthReportPage(
        kind="environments",
        folder=str(folder),
        attempted=attempted,
        accepted=len(accepted),
        stages=stages,
        reasons=_reasons([(r["stage"], r["reason"]) for r in rejected]),
        coverage=coverage,
        accepted_without_repair=first_try,
        price_model=costs.price_model,
        usd_total=costs.total.usd,
        usd_per_accepted=costs.usd_per_accepted,
        reference_usd=PUBLISHED_USD_PER_ENVIRONMENT,
        reference_label="skeleton paper, per environment",
    )


def _scenarios_page(folder: Path) -> SynthReportPage:
    saved = SynthesisReport.model_validate(orjson.loads((folder / "report.json").read_bytes()))
    records = list(Journal(folder / "attempts.jsonl").records.values())
    tallies = summarize_attempts(records, saved.price_model) if records else saved
    rejected = _read_jsonl(folder / "rejected.jsonl")
    solve_rates: list[float] = []
    difficulty: Counter[str] = Counter()
    for record in records:
        scenario = record.get("scenario") or {}
        rollouts = (scenario.get("provenance") or {}).get("details", {}).get("rollouts")
        if record.get("accepted") and rollouts and "solve_rate" in rollouts:
            solve_rates.append(float(rollouts["solve_rate"]))
            difficulty[str(scenario.get("difficulty"))] += 1
        elif rollouts and not record.get("accepted") and record.get("rejected_by") == "rollouts":
            solve_rates.append(0.0)
    return SynthReportPage(
        kind="scenarios",
        folder=str(folder),
        attempted=saved.attempted,
        accepted=saved.accepted,
        stages=[StageRow(stage=g, evaluated=t.evaluated, passed=t.passed) for g, t in tallies.gates.items()],
        reasons=_reasons([(r.get("rejected_by") or "?", r.get("reason") or "") for r in rejected]),
        solve_rates=solve_rates,
        difficulty=dict(difficulty),
        rollout_verified=len([r for r in solve_rates if r > 0]),
        duplicates=saved.duplicates,
        dedup=saved.dedup,
        price_model=saved.price_model,
        usd_total=saved.usd_total,
        usd_per_accepted=saved.usd_per_accepted,
        reference_usd=PUBLISHED_USD_PER_SCENARIO,
        reference_label="skeleton paper, per scenario",
    )


def build_report(folder: Path) -> SynthReportPage:
    if (folder / "costs.json").exists():
        return _environments_page(folder)
    if (folder / "report.json").exists():
        return _scenarios_page(folder)
    raise ReportError(f"{folder} holds no synthesis output (no costs.json or report.json)")


# ---------------------------------------------------------------------------------------------- rendering


def _rate(passed: int, evaluated: int) -> str:
    return f"{passed / evaluated:.0%}" if evaluated else "n/a"


def _tables(page: SynthReportPage) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every table on the page, shared by both renderings."""
    what = "environments" if page.kind == "environments" else "scenarios"
    per = f"${page.usd_per_accepted:.4f}" if page.usd_per_accepted is not None else "n/a (none accepted)"
    tables: list[tuple[str, list[str], list[list[str]]]] = [
        (
            "Summary",
            ["measure", "value"],
            [
                ["attempted", str(page.attempted)],
                [f"accepted {what}", str(page.accepted)],
                ["acceptance", _rate(page.accepted, page.attempted)],
                [f"cost at {page.price_model} prices", f"${page.usd_total:.4f}"],
                [f"cost per accepted {what[:-1]}", per],
                [page.reference_label, f"${page.reference_usd:.2f}"],
                *(
                    [
                        [
                            "accepted on first assessment / after repair",
                            f"{_rate(page.accepted_without_repair, page.attempted)} / "
                            f"{_rate(page.accepted, page.attempted)}",
                        ],
                        ["EnvFactory, first try / after revision", "about 55% / about 80%"],
                    ]
                    if page.accepted_without_repair is not None
                    else []
                ),
            ],
        ),
        (
            "Acceptance per stage",
            ["stage", "evaluated", "passed", "acceptance"],
            [[s.stage, str(s.evaluated), str(s.passed), _rate(s.passed, s.evaluated)] for s in page.stages],
        ),
        (
            "Rejection reasons",
            ["stage", "count", "example"],
            [[r.stage, str(r.count), r.example] for r in page.reasons] or [["-", "0", "nothing was rejected"]],
        ),
    ]
    if page.kind == "environments":
        tables.append(
            (
                "Assessment coverage",
                ["environment", "kept", "tools exercised", "never exercised"],
                [
                    [
                        c.environment_id,
                        "yes" if c.accepted else "no",
                        f"{c.exercised}/{c.tools}",
                        ", ".join(c.unexercised),
                    ]
                    for c in page.coverage
                ],
            )
        )
        for row in page.coverage:
            if row.per_tool:
                tables.append(
                    (
                        f"Coverage per tool: {row.environment_id}",
                        ["tool", "tested", "positive", "negative", "passed"],
                        [
                            [name, *(str(entry.get(k, 0)) for k in ("total", "positive", "negative", "passed"))]
                            for name, entry in row.per_tool.items()
                        ],
                    )
                )
    else:
        rates = page.solve_rates
        mean = f"{sum(rates) / len(rates):.2f}" if rates else "n/a (no solver rollouts)"
        tables.append(
            (
                "Rollout verification and duplicates",
                ["measure", "value"],
                [
                    ["scenarios with solver rollouts", str(len(rates))],
                    ["mean solve rate", mean],
                    ["difficulty (accepted)", ", ".join(f"{k} {v}" for k, v in sorted(page.difficulty.items())) or "-"],
                    ["duplicates dropped", str(page.duplicates or 0)],
                    ["duplicates found by", page.dedup or "-"],
                ],
            )
        )
    return tables


def render_markdown(page: SynthReportPage) -> str:
    lines = [f"# Synthesis report: {page.folder}", ""]
    for title, header, rows in _tables(page):
        lines += [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines)


def render_html(page: SynthReportPage) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Synthesis report: {html.escape(page.folder)}</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:0 0 1.5em}td,th{border:1px solid #ccc;padding:4px 8px;"
        "text-align:left;font-size:14px}th{background:#f3f3f3}</style></head><body>",
        f"<h1>Synthesis report: {html.escape(page.folder)}</h1>",
    ]
    for title, header, rows in _tables(page):
        parts.append(f"<h2>{html.escape(title)}</h2><table><tr>")
        parts += [f"<th>{html.escape(cell)}</th>" for cell in header]
        parts.append("</tr>")
        for row in rows:
            parts.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return "".join(parts)


def write_report(folder: Path, out: Path | None = None) -> tuple[SynthReportPage, Path, Path]:
    """Build the page for ``folder`` and write ``report.md`` and ``report.html`` (into ``out`` or ``folder``)."""
    page = build_report(folder)
    target = out or folder
    target.mkdir(parents=True, exist_ok=True)
    markdown, page_html = target / "synth_report.md", target / "synth_report.html"
    markdown.write_text(render_markdown(page))
    page_html.write_text(render_html(page))
    return page, markdown, page_html
