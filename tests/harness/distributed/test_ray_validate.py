"""``harness validate --ray``: the library split over the test cluster's nodes gives the local report."""

from __future__ import annotations

from pathlib import Path

import orjson

from harness.library import load_library, write_seed_layout
from tests.support.ray_cluster import cli


def small_library(folder: Path) -> Path:
    """Three seed environments with their scenarios, one scenario whose environment is missing, and one line
    that does not load."""
    seed = load_library()
    chosen = sorted(seed.environments)[:3]
    scenarios = [s for s in seed.scenarios if s.environment_id in chosen]
    broken = scenarios[0].model_copy(update={"environment_id": "retired_environment"})
    write_seed_layout([seed.environments[e] for e in chosen], [broken, *scenarios[1:]], folder)
    with (folder / "scenarios" / f"{chosen[0]}.jsonl").open("ab") as handle:
        handle.write(b'{"id": "not-a-scenario"}\n')
    return folder


def test_validate_over_the_cluster_gives_the_local_report(ray_cluster, tmp_path):
    folder = small_library(tmp_path / "library")
    reports = {}
    for name, extra in (("local", []), ("ray", ["--ray", ray_cluster.address])):
        process = cli(["validate", str(folder), "--json", "--workers", "1", *extra], {})
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 1, stderr  # the broken records make the library invalid
        reports[name] = orjson.loads(stdout)
    assert reports["ray"] == reports["local"]
    invalid = [record["id"] for record in reports["local"]["records"] if not record["ok"]]
    assert len(invalid) == 2 and len(reports["local"]["records"]) > 6
