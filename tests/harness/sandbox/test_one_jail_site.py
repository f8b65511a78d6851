"""Pools are made at one site and the trust rule is decided in one place (``harness/sandbox/spec.py``).

Every module of the project (the engine, agents, synthesis, leaderboards, benchmarks, examples and these tests) is
read as source: a new ``SandboxPool(...)`` anywhere else, a trust decision taken by hand (``full_confinement=``, a
negated ``allow_weak_sandbox``) or a read of ``Library.from_hub`` outside the library record would bring back the
per-site copies of the rule through which Hub code once ran under a weak sandbox.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SPEC = Path("harness/sandbox/spec.py")
LIBRARY_RECORD = Path("harness/records/library.py")
CODE = ("harness", "agents", "synth", "leaderboards", "bench", "examples")


def modules(*folders: str) -> Iterator[tuple[Path, ast.Module]]:
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT), ast.parse(path.read_text(), filename=str(path))


def calls_named(tree: ast.AST, name: str) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if called == name:
                lines.append(node.lineno)
    return lines


def keyword_lines(tree: ast.AST, keyword: str) -> list[int]:
    return [node.value.lineno for node in ast.walk(tree) if isinstance(node, ast.keyword) and node.arg == keyword]


def test_the_scan_reads_every_part_of_the_project():
    scanned = {path.parts[0] for path, _ in modules(*CODE, "tests")}
    assert scanned == {*CODE, "tests"}
    spec = dict(modules("harness"))[SPEC]
    assert calls_named(spec, "SandboxPool"), "the scan no longer sees the one site itself"


def test_a_sandbox_pool_is_made_only_by_the_jail_spec():
    sites = [
        f"{path}:{line}"
        for path, tree in modules(*CODE, "tests")
        if path != SPEC
        for line in calls_named(tree, "SandboxPool")
    ]
    assert sites == [], "make pools with JailSpec(...).pool() (or Library.jail(...).pool()): " + ", ".join(sites)


def test_the_trust_rule_is_decided_only_in_the_jail_spec():
    decided = []
    for path, tree in modules(*CODE):
        if path == SPEC:
            continue
        decided += [f"{path}:{line} full_confinement=" for line in keyword_lines(tree, "full_confinement")]
        decided += [
            f"{path}:{line} require_full_confinement=" for line in keyword_lines(tree, "require_full_confinement")
        ]
        for node in ast.walk(tree):
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                named = node.operand
                name = (
                    named.id if isinstance(named, ast.Name) else named.attr if isinstance(named, ast.Attribute) else ""
                )
                if name == "allow_weak_sandbox":
                    decided.append(f"{path}:{node.lineno} not allow_weak_sandbox")
            if isinstance(node, ast.Attribute) and node.attr == "from_hub" and path != LIBRARY_RECORD:
                decided.append(f"{path}:{node.lineno} .from_hub")
    assert decided == [], "decide trust with JailSpec.for_code or Library.jail: " + ", ".join(decided)
