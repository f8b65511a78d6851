"""The library record, the reviewable seed layout, and reading a library source of any kind into a library.

Nothing here imports the Hub package: reading a Hub-format folder or a Hub dataset is handed in as
:class:`HubReaders` (``harness.library.load_library`` passes the Hub package's readers), so the Hub package can
read libraries through this module without an import circle."""

from __future__ import annotations

import itertools
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from harness.collector import collector_paused
from harness.errors import BadInput
from harness.names import require_safe_id
from harness.records.containment import OutsideLibrary, require_inside
from harness.records.fingerprint import fingerprint
from harness.records.scenario_json import scenario_json
from harness.records.scenario_lines import ScenarioLines
from harness.registry import jail_environments, jail_modules
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.policy import optional_modules_named_in
from harness.sandbox.spec import CodeOrigin, JailSpec
from harness.schema import DatasetRef, Environment, Provenance, Scenario
from harness.schema.jail import JailEnvironment
from harness.toolspec import derive_tools

logger = logging.getLogger(__name__)

SEED_LIBRARY = Path(__file__).resolve().parents[2] / "datasets" / "seed"


class LibraryError(BadInput):
    """A library source that cannot be read at all."""


@dataclass
class Library:
    environments: dict[str, Environment]
    scenarios: list[Scenario]
    source: DatasetRef
    problems: list[str] = field(default_factory=list)
    from_hub: bool = False
    """Downloaded from the Hub (a stranger's code): runs only under a full jail unless the user allows less."""

    @classmethod
    def of(cls, environments: Iterable[Environment], scenarios: Iterable[Scenario], *, source: str) -> Library:
        """A library held in memory (environments this machine made, as synthesis does): its code is local."""
        return cls({e.id: e for e in environments}, list(scenarios), DatasetRef(source=source))

    def scenarios_for(self, environment_id: str) -> list[Scenario]:
        return [s for s in self.scenarios if s.environment_id == environment_id]

    def optional_modules(self, scenarios: Iterable[Scenario] | None = None) -> frozenset[str]:
        """The jail modules a sandbox pool must load to run these scenarios (by default the whole library: every
        environment, every check): those their environments' code or their checks name
        (``JailSpec(optional_modules=...)``)."""
        chosen = self.scenarios if scenarios is None else list(scenarios)
        if scenarios is None:
            codes = {environment.code for environment in self.environments.values()}
        else:
            codes = {self.environments[s.environment_id].code for s in chosen if s.environment_id in self.environments}
        checks = (check.source for scenario in chosen for check in scenario.checks)
        return optional_modules_named_in(itertools.chain(codes, checks), jail_modules())

    def jail_environment(self, scenarios: Iterable[Scenario] | None = None) -> JailEnvironment | None:
        """The jail environment these scenarios' environments run in (by default the whole library's): the one their
        benchmark declares, found by each environment's ``provenance.source``, so a library imported before its
        benchmark declared one gets it too. Environments of two benchmarks with different environments cannot share
        a pool: refused in one line."""
        if scenarios is None:
            chosen = list(self.environments.values())
        else:
            ids = {s.environment_id for s in scenarios}
            chosen = [e for e in self.environments.values() if e.id in ids]
        declared = jail_environments()
        found = {
            declared[e.provenance.source].key: declared[e.provenance.source]
            for e in chosen
            if e.provenance.source in declared
        }
        if len(found) > 1:
            names = ", ".join(sorted(environment.name for environment in found.values()))
            raise LibraryError(
                f"{self.source.source} holds environments of benchmarks whose code runs on different pinned packages "
                f"({names}): run each benchmark's scenarios separately (--scenario or a library of its own)"
            )
        return next(iter(found.values()), None)

    @property
    def code_origin(self) -> CodeOrigin:
        return CodeOrigin.HUB if self.from_hub else CodeOrigin.LOCAL

    def jail(
        self,
        scenarios: Iterable[Scenario] | None = None,
        *,
        allow_weak_sandbox: bool = False,
        workers: int | None = None,
        limits: SandboxLimits | None = None,
    ) -> JailSpec:
        """The jail that runs this library's code (the trust rule applied to where it came from), loading the
        optional modules these scenarios need (by default the whole library's), from their benchmark's jail
        environment when it declares one."""
        chosen = None if scenarios is None else list(scenarios)
        return JailSpec.for_code(
            self.code_origin,
            allow_weak_sandbox=allow_weak_sandbox,
            workers=workers,
            limits=limits,
            optional_modules=self.optional_modules(chosen),
            environment=self.jail_environment(chosen),
        )


def one_line(error: Exception, limit: int = 300) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def load_seed_layout(root: Path) -> Library:
    """``environments/<id>.py`` + ``environments/<id>.json`` and ``scenarios/<id>.jsonl``.

    A record that does not load is reported in ``problems`` with its file and line; the others still load.
    """
    metas = sorted((root / "environments").glob("*.json"))
    scenario_files = sorted((root / "scenarios").glob("*.jsonl"))
    for path in [*metas, *(m.with_suffix(".py") for m in metas), *scenario_files]:
        if path.exists() or path.is_symlink():
            require_inside(path, root, "library file")  # before any file is read
    environments: dict[str, Environment] = {}
    problems: list[str] = []
    for meta_path in metas:
        code_path = meta_path.with_suffix(".py")
        try:
            meta = orjson.loads(meta_path.read_bytes())
            code = code_path.read_text()
            meta.setdefault("id", meta_path.stem)
            meta.setdefault("name", meta["id"])
            provenance = meta.pop("provenance", None) or Provenance(source="seed-library").model_dump()
            environment = Environment.model_validate({**meta, "code": code, "provenance": provenance})
            if not environment.tools:
                environment = environment.model_copy(update={"tools": derive_tools(code, environment.class_name)})
            environments[environment.id] = environment
        except Exception as exc:
            problems.append(f"{meta_path.name}: {one_line(exc)}")
    scenarios: list[Scenario] = []
    lines = ScenarioLines()
    for path in scenario_files:
        with path.open("rb") as records:  # a line at a time: a benchmark's file can be hundreds of MB
            for number, line in enumerate(records, start=1):
                if not line.strip():
                    continue
                try:
                    scenarios.append(lines.scenario(line))
                except Exception as exc:
                    problems.append(f"{path.name}:{number}: {one_line(exc)}")
    ref = DatasetRef(source=str(root), fingerprint=fingerprint(environments, scenarios))
    return Library(environments, scenarios, ref, problems)


def is_seed_layout(path: Path) -> bool:
    return (path / "environments").is_dir() and any((path / "environments").glob("*.py"))


Records = tuple[list[Environment], list[Scenario], DatasetRef]


@dataclass(frozen=True)
class HubReaders:
    """How to read the two Hub kinds of source: a Hub-format folder, and a Hub dataset id ``org/name[@rev]``."""

    records_folder: Callable[[Path], Records]
    hub_dataset: Callable[[str], Records]


def read_library_source(source: str | Path | None, readers: HubReaders) -> Library:
    """Environments and scenarios from a folder (seed layout or Hub-format) or a Hub id ``org/name[@rev]``;
    ``None`` is the bundled seed library.

    Raises :class:`LibraryError` (one line naming the source) when the source cannot be read at all; records
    that do not load are listed in ``Library.problems``."""
    try:
        with collector_paused():
            library = _read(source, readers)
    except (LibraryError, OutsideLibrary):
        raise
    except Exception as exc:  # Hub, network, file and format errors of every kind: one line naming the source
        detail = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise LibraryError(f"cannot load {str(source)!r}: {type(exc).__name__}: {detail}") from exc
    if not library.environments and not library.scenarios and not library.problems:
        raise LibraryError(f"{str(source)!r} holds no environments and no scenarios")
    return library


def _read(source: str | Path | None, readers: HubReaders) -> Library:
    if source is None:
        return load_seed_layout(SEED_LIBRARY)
    path = Path(source)
    if path.exists():
        if is_seed_layout(path):
            return load_seed_layout(path)
        environments, scenarios, ref = readers.records_folder(path)
        return Library({e.id: e for e in environments}, scenarios, ref)
    text = str(source)
    if text.startswith(("/", "./", "../", "~")) or text.endswith("/") or text in (".", ".."):
        raise LibraryError(f"{text!r}: no such folder (give a library folder, or a Hub dataset id org/name)")
    if text.count("/") == 1 or "@" in text:
        environments, scenarios, ref = readers.hub_dataset(text)
        return Library({e.id: e for e in environments}, scenarios, ref, from_hub=True)
    raise LibraryError(f"{text!r} is neither an existing folder nor a Hub dataset id (org/name[@revision])")


def write_seed_layout(environments: list[Environment], scenarios: list[Scenario], out: Path) -> None:
    """Write records in the reviewable layout: class as ``.py``, metadata as ``.json``, scenarios as JSONL.

    Every id that becomes a file name is checked before anything is written (UnsafeIdentifier names the record).
    """
    for environment in environments:
        require_safe_id(environment.id, "environment id")
    for scenario in scenarios:
        require_safe_id(scenario.environment_id, f"environment id of scenario {scenario.id!r}")
    (out / "environments").mkdir(parents=True, exist_ok=True)
    (out / "scenarios").mkdir(parents=True, exist_ok=True)
    for environment in environments:
        (out / "environments" / f"{environment.id}.py").write_text(environment.code)
        meta = environment.model_dump(mode="json", exclude={"code"})
        (out / "environments" / f"{environment.id}.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2))
    by_environment: dict[str, list[Scenario]] = {}
    for scenario in scenarios:
        by_environment.setdefault(scenario.environment_id, []).append(scenario)
    for env_id, items in by_environment.items():
        lines = [scenario_json(s) for s in items]
        (out / "scenarios" / f"{env_id}.jsonl").write_bytes(b"\n".join(lines) + b"\n")


def write_new_library(environments: list[Environment], scenarios: list[Scenario], out: Path) -> None:
    """:func:`write_seed_layout` all at once: into a sibling folder first, then renamed to ``out`` (which must not
    exist, or be empty), so that an interrupted write leaves nothing half-written in ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write_seed_layout(environments, scenarios, staging)
        if out.exists():
            out.rmdir()
        staging.replace(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
