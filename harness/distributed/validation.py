"""``harness validate --ray``: the library's environments split over the cluster's nodes, one part per node.

An environment and its scenarios go to the same part (a scenario is replayed on its own environment), each
part is validated on its node by ``harness.validate.validate_library`` in a sandbox pool there, and the report
comes back in the library's order, exactly as a local validation writes it.
"""

from __future__ import annotations

import asyncio
from collections import deque

from harness.library import Library
from harness.sandbox import SandboxPool
from harness.validate import RecordReport, ValidationReport, validate_library

from .cluster import ClusterUnavailable, alive_nodes, check_nodes, import_ray, join, root_cause


def split_library(library: Library, parts: int) -> list[Library]:
    """``parts`` libraries, each environment with all of its scenarios, environments dealt round-robin."""
    environment_ids = sorted({*library.environments, *(s.environment_id for s in library.scenarios)})
    part_of = {env_id: index % parts for index, env_id in enumerate(environment_ids)}
    return [
        Library(
            environments={k: v for k, v in library.environments.items() if part_of[k] == part},
            scenarios=[s for s in library.scenarios if part_of[s.environment_id] == part],
            source=library.source,
            problems=library.problems if part == 0 else [],
            from_hub=library.from_hub,
        )
        for part in range(parts)
    ]


def validate_part(
    library: Library, workers: int | None, concurrency: int, allow_weak_sandbox: bool = False
) -> list[RecordReport]:
    """Runs on a node: validate one part in a sandbox pool there (Hub code only under the full jail unless
    ``allow_weak_sandbox``)."""

    async def go() -> ValidationReport:
        confine_fully = library.from_hub and not allow_weak_sandbox
        async with SandboxPool(workers=workers, require_full_confinement=confine_fully) as pool:
            return await validate_library(library, pool, concurrency=concurrency)

    return asyncio.run(go()).records


async def validate_on_cluster(
    library: Library,
    address: str = "local",
    *,
    workers: int | None = None,
    concurrency: int = 16,
    allow_weak_sandbox: bool = False,
) -> ValidationReport:
    """Validate ``library`` on the Ray cluster at ``address``; the same report as a local validation."""
    owns_ray = join(address)
    ray = import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        nodes = alive_nodes()
        if not nodes:
            raise ClusterUnavailable(f"the Ray cluster at {address} has no alive node")
        nodes = await asyncio.to_thread(check_nodes, nodes, [])
        parts = split_library(library, len(nodes))
        task = ray.remote(num_cpus=0, max_retries=2)(validate_part)
        references = [
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=True)).remote(
                part, workers, concurrency, allow_weak_sandbox
            )
            for node, part in zip(nodes, parts, strict=True)
        ]
        try:
            answers: list[list[RecordReport]] = list(
                await asyncio.gather(*(asyncio.wrap_future(reference.future()) for reference in references))
            )
        except ray.exceptions.RayError as exc:
            raise ClusterUnavailable(f"validation on the cluster failed: {root_cause(exc)}") from None
    finally:
        if owns_ray:
            ray.shutdown()
    return ValidationReport(source=library.source.source, records=_in_library_order(library, parts, answers))


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
