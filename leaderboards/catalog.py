"""What a run's environment set says about its environments and scenarios, when that set is at hand.

A run manifest names its environment set (``dataset.source``) and fingerprints it. When the source is a local
folder that still holds the same content (same fingerprint), the reports use it for environment domains, task
texts and check descriptions. Nothing is downloaded: a Hub id, a missing folder, a folder whose content has
changed since the run, or a manifest without a fingerprint gives an empty catalog, and the reports fall back to
what the trajectories hold. A run folder may come from someone else: without the fingerprint, a manifest naming a
private folder of this machine would put that folder's task texts into a report.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from harness.library import load_library
from harness.schema import RunManifest, Scenario

logger = logging.getLogger(__name__)


@dataclass
class Catalog:
    domains: dict[str, str] = field(default_factory=dict)
    """Environment id → domain."""
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    """Scenario id → scenario."""


class CatalogCache:
    """Loads each environment set folder once per leaderboard build."""

    def __init__(self) -> None:
        self._loaded: dict[tuple[str, str | None], Catalog] = {}

    def for_run(self, manifest: RunManifest) -> Catalog:
        dataset = manifest.dataset
        key = (dataset.source, dataset.fingerprint)
        if key not in self._loaded:
            self._loaded[key] = load_catalog(manifest)
        return self._loaded[key]


def load_catalog(manifest: RunManifest) -> Catalog:
    dataset = manifest.dataset
    folder = Path(dataset.source)
    if not dataset.fingerprint or not folder.is_dir():
        return Catalog()
    try:
        library = load_library(folder)
    except Exception as error:  # a broken or foreign folder only costs the extra details
        logger.warning("cannot read the environment set %s for report details: %s", folder, error)
        return Catalog()
    if library.source.fingerprint != dataset.fingerprint:
        logger.warning(
            "the environment set in %s changed since run %s (fingerprint %s, now %s); not using it for details",
            folder,
            manifest.run_id,
            dataset.fingerprint,
            library.source.fingerprint,
        )
        return Catalog()
    return Catalog(
        domains={env_id: env.domain for env_id, env in library.environments.items() if env.domain},
        scenarios={scenario.id: scenario for scenario in library.scenarios},
    )
