"""The content fingerprint of a set of environments and scenarios: what a library and a Hub dataset both record.

It imports only the schema, so the library loader and the Hub code can both use it without importing each other.
"""

from __future__ import annotations

import hashlib

import orjson

from harness.records.scenario_json import scenario_json
from harness.schema import Environment, Scenario


def fingerprint(environments: dict[str, Environment], scenarios: list[Scenario]) -> str:
    """Sixteen hex digits of a SHA-256 over each environment's code and texts and each scenario (without its
    provenance), in id order, so the same content gives the same fingerprint wherever it was loaded from."""
    digest = hashlib.sha256()
    for env_id in sorted(environments):
        env = environments[env_id]
        digest.update(orjson.dumps([env.id, env.code, env.introduction, env.rules], option=orjson.OPT_SORT_KEYS))
    for scenario in sorted(scenarios, key=lambda s: s.id):
        digest.update(scenario_json(scenario, {"provenance"}, sort_keys=True))
    return digest.hexdigest()[:16]
