"""``harness validate --ray``: the library's environments split over the fleet's executors, one part each.

An environment and its scenarios go to the same part (a scenario is replayed on its own environment), each
part is validated by ``harness.validate.validate_library`` in its executor's sandbox pool, and the report comes
back in the library's order, exactly as a local validation writes it. A part whose executor is lost is
re-queued on another, as every unit of the fleet is.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import ClassVar

from harness.library import Library
from harness.llm import EndpointLimits, RetryPolicy
from harness.llm.client import DEFAULT_TIMEOUT_S
from harness.validate import RecordReport, ValidationReport, validate_library

from .fleet import Fleet
from .settings import ExecutorConfig, WorkUnit
from .worker import FleetExecutor

VALIDATE_PART = "validate_part"


def split_library(library: Library, parts: int) -> list[Library]:
    """``parts`` libraries, each environment with all of its scenarios, environments dealt round-robin."""
    environment_ids = sorted({*library.environments, *(s.environment_id for s in library.scenarios)})
    part_of = {env_id: index % parts for index, env_id in enumerate(environment_ids)}
    return [
        replace(  # each part keeps the library's source and origin, so the jail's trust rule sees the same code
            library,
            environments={k: v for k, v in library.environments.items() if part_of[k] == part},
            scenarios=[s for s in library.scenarios if part_of[s.environment_id] == part],
            problems=library.problems if part == 0 else [],
        )
        for part in range(parts)
    ]


@dataclass(frozen=True)
class ValidationJob:
    """The job of validation executors (``ExecutorConfig.job``)."""

    concurrency: int


class ValidationExecutor(FleetExecutor):
    """Ray actor body for ``harness validate --ray``: validates one part of the library in its sandbox pool."""

    WORK: ClassVar[frozenset[str]] = frozenset({VALIDATE_PART})

    async def validate_part(self, part: Library) -> bytes:
        job: ValidationJob = self.config.job
        report = await validate_library(part, self.pool, concurrency=job.concurrency)
        return report.model_dump_json().encode()


async def validate_on_cluster(
    library: Library,
    address: str = "local",
    *,
    workers: int | None = None,
    concurrency: int = 16,
    allow_weak_sandbox: bool = False,
) -> ValidationReport:
    """Validate ``library`` on the Ray cluster at ``address``; the same report as a local validation. Hub code
    runs only under the full jail unless ``allow_weak_sandbox``."""
    config = ExecutorConfig(
        aliases={},  # validation calls no model
        retry=RetryPolicy(),
        default_limits=EndpointLimits(),
        timeout=DEFAULT_TIMEOUT_S,
        cache_dir=None,
        jail=library.jail(allow_weak_sandbox=allow_weak_sandbox, workers=workers),
        environment={},
        job=ValidationJob(concurrency),
    )
    fleet = Fleet(address, what="validation", resume_hint="run the validation again once nodes are back")
    try:
        await fleet.start(ValidationExecutor, config, modules=[])
        parts = split_library(library, sum(executor.alive for executor in fleet.executors))
        answers: dict[str, list[RecordReport]] = {}

        def arrived(unit: WorkUnit, payload: bytes) -> None:
            answers[unit.key] = ValidationReport.model_validate_json(payload).records

        units = [WorkUnit(str(number), VALIDATE_PART, part) for number, part in enumerate(parts)]
        await fleet.dispatch(units, in_flight=len(units), on_result=arrived)
    finally:
        await fleet.close()
    ordered = [answers[str(number)] for number in range(len(parts))]
    return ValidationReport(source=library.source.source, records=_in_library_order(library, parts, ordered))


def _in_library_order(library: Library, parts: list[Library], answers: list[list[RecordReport]]) -> list[RecordReport]:
    """Each part's records are its loading problems, its environments, then its scenarios, in library order:
    deal them back."""
    problems: list[RecordReport] = []
    environments: dict[str, deque[RecordReport]] = {}
    scenarios: dict[str, deque[RecordReport]] = {}
    for part, records in zip(parts, answers, strict=True):
        queue = deque(records)
        problems.extend(queue.popleft() for _ in part.problems)
        for env_id in part.environments:
            environments.setdefault(env_id, deque()).append(queue.popleft())
        for scenario in part.scenarios:
            scenarios.setdefault(scenario.environment_id, deque()).append(queue.popleft())
    ordered = [environments[env_id].popleft() for env_id in library.environments]
    ordered += [scenarios[s.environment_id].popleft() for s in library.scenarios]
    return problems + ordered
