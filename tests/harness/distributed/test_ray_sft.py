"""``harness sft --ray``: teacher rollouts on the test cluster give the same SFT files as a local run."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.doubles.mock_openai import MockOpenAIServer
from tests.harness.distributed.test_ray_runner import write_aliases
from tests.harness.run.test_runner import register_scenarios
from tests.support.ray_cluster import cli


def sft_files(out: Path) -> dict[str, list[bytes]]:
    """Every SFT file's rows, in a stable order (rollouts finish in any order on either path)."""
    files = {path.name: sorted(path.read_bytes().splitlines()) for path in out.glob("*.jsonl")}
    files["stats.json"] = [orjson.dumps(orjson.loads((out / "stats.json").read_bytes()), option=orjson.OPT_SORT_KEYS)]
    return files


def test_sft_over_the_cluster_writes_the_same_files_as_locally(ray_cluster, tmp_path):
    mock = MockOpenAIServer(record_bodies=False)
    register_scenarios(mock)
    with mock.running_in_thread():
        models = tmp_path / "models.toml"
        write_aliases(models, mock)
        env = {"HARNESS_MODELS_FILE": str(models)}
        common = ["sft", "--teacher", "mock-agent", "--mode", "nonconv", "--limit", "4", "--attempts", "1"]
        common += ["--temperature", "0"]
        outputs = {}
        for name, extra in (("local", []), ("ray", ["--ray", ray_cluster.address])):
            process = cli([*common, "--out", str(tmp_path / name), *extra], env)
            stdout, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, stdout + stderr
            outputs[name] = sft_files(tmp_path / name)
    assert outputs["ray"] == outputs["local"]
    assert any(rows for name, rows in outputs["local"].items() if name.endswith(".jsonl"))
    manifest = orjson.loads((tmp_path / "ray" / "rollouts" / "manifest.json").read_bytes())
    assert len(manifest["cluster"]["nodes"]) == 2
