"""Adversarial environment code: each attack gives a clear error while the pool keeps serving other episodes."""

from __future__ import annotations

import pytest

from harness.sandbox import EnvironmentLoadError, JailSpec, SandboxLimits, find_problems
from harness.schema import Environment, ObservationKind, ToolCall
from harness.toolspec import derive_tools

# The static checks refuse most of these attacks outright (see test_static_checks_refuse_escapes). To exercise the
# runtime defences behind them (audit hook, guarded builtins, limits), the tests make the pool believe the code
# passed its static checks.
ATTACKS = '''
import json
import time


class Hostile:
    def __init__(self, init_config: dict):
        self.counter = init_config.get("counter", 0)

    def bump(self) -> dict:
        """Increment the counter."""
        self.counter += 1
        return {"success": True, "data": self.counter}

    def spin(self) -> dict:
        """An infinite loop."""
        while True:
            pass

    def obstinate_spin(self) -> dict:
        """An infinite loop that swallows the timeout."""
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass

    def memory_bomb(self) -> dict:
        """Allocate far past the memory limit (as address space: how fast the machine fills pages must not decide
        whether the call first hits its time limit)."""
        hoard = []
        while True:
            hoard.append(bytes(10_000_000))  # zeroed pages, never touched: the cap stops it at once

    def recurse(self, depth: int = 0) -> dict:
        """Unbounded recursion."""
        return self.recurse(depth + 1)

    def write_file(self) -> dict:
        """Write to disk through a builtin found by name."""
        opener = getattr(__builtins__, "get")("open") if isinstance(__builtins__, dict) else None
        if opener is None:
            raise RuntimeError("open is not available")
        with opener("/tmp/sandbox-escape.txt", "w") as handle:
            handle.write("escaped")
        return {"success": True}

    def connect(self) -> dict:
        """Open a socket through the import machinery."""
        importer = getattr(__builtins__, "get")("__import__")
        socket = importer("socket")
        socket.create_connection(("127.0.0.1", 9))
        return {"success": True}

    def shell(self) -> dict:
        """Run a shell command."""
        importer = getattr(__builtins__, "get")("__import__")
        importer("os").system("touch /tmp/sandbox-escape-shell")
        return {"success": True}

    def subprocess_escape(self) -> dict:
        """Start a process."""
        importer = getattr(__builtins__, "get")("__import__")
        importer("subprocess").run(["true"])
        return {"success": True}

    def mro_escape(self) -> dict:
        """Walk to object's subclasses."""
        cls = getattr((), "__cl" + "ass__")
        return {"success": True, "data": str(cls)}

    def huge_result(self) -> dict:
        """Return 50 MB."""
        return {"success": True, "data": "x" * 50_000_000}

    def not_json(self) -> dict:
        """Return something JSON cannot hold."""
        return {"success": True, "data": object()}

    def raises(self) -> dict:
        """Raise an exception."""
        raise ValueError("broken tool")
'''


def hostile_environment() -> Environment:
    return Environment(
        id="hostile", name="Hostile", class_name="Hostile", code=ATTACKS, tools=derive_tools(ATTACKS, "Hostile")
    )


def test_static_checks_refuse_the_hostile_class_outright():
    problems = find_problems(ATTACKS)
    assert any("__builtins__" in p for p in problems)


@pytest.fixture
async def pool():
    limits = SandboxLimits(call_timeout_s=2.0, kill_grace_s=0.5, memory_mb=256)
    async with JailSpec(workers=2, limits=limits).pool() as sandbox:
        sandbox._checked[ATTACKS] = []  # pretend the static checks missed everything
        yield sandbox


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(id=f"call_{name}", name=name, arguments=arguments)


@pytest.mark.parametrize(
    ("tool", "expected_kinds", "message_part"),
    [
        ("spin", {ObservationKind.TIMEOUT}, "CPU-time limit of 2 s"),
        ("obstinate_spin", {ObservationKind.RESOURCE_LIMIT}, "kept computing past its CPU-time limit"),
        ("memory_bomb", {ObservationKind.RESOURCE_LIMIT}, "memory"),
        ("recurse", {ObservationKind.TOOL_EXCEPTION}, "RecursionError"),
        ("write_file", {ObservationKind.TOOL_EXCEPTION, ObservationKind.FORBIDDEN}, "open"),
        ("connect", {ObservationKind.TOOL_EXCEPTION, ObservationKind.FORBIDDEN}, "socket"),
        ("shell", {ObservationKind.TOOL_EXCEPTION, ObservationKind.FORBIDDEN}, "os"),
        ("subprocess_escape", {ObservationKind.TOOL_EXCEPTION, ObservationKind.FORBIDDEN}, "subprocess"),
        ("mro_escape", {ObservationKind.TOOL_EXCEPTION}, "__class__"),
        ("huge_result", {ObservationKind.BAD_RESULT}, "limit"),
        ("not_json", {ObservationKind.BAD_RESULT}, "JSON"),
        ("raises", {ObservationKind.TOOL_EXCEPTION}, "broken tool"),
    ],
)
async def test_attack_is_contained_and_pool_keeps_serving(pool, tool, expected_kinds, message_part, tmp_path):
    environment = hostile_environment()
    victim = await pool.open_session(environment, {"counter": 10})
    bystander = await pool.open_session(environment, {"counter": 100})
    await victim.call(call("bump"))
    await bystander.call(call("bump"))

    observation, diff = await victim.call(call(tool))

    assert observation.kind in expected_kinds, observation
    assert message_part in (observation.error or ""), observation.error
    assert diff == []
    # Both sessions, including the one whose worker may have been replaced, still hold their own state.
    assert (await victim.call(call("bump")))[0].content == {"success": True, "data": 12}
    assert (await bystander.call(call("bump")))[0].content == {"success": True, "data": 102}
    await victim.close()
    await bystander.close()


async def test_nothing_escaped_to_disk(pool):
    import os

    environment = hostile_environment()
    session = await pool.open_session(environment, {})
    for tool in ("write_file", "shell", "subprocess_escape"):
        await session.call(call(tool))
    assert not os.path.exists("/tmp/sandbox-escape.txt")
    assert not os.path.exists("/tmp/sandbox-escape-shell")


@pytest.mark.parametrize(
    "snippet",
    [
        "import os",
        "import subprocess",
        "from socket import socket",
        "x = eval('1')",
        "exec('x = 1')",
        "f = open('/etc/passwd')",
        "m = __import__('os')",
        "c = ().__class__.__mro__",
        "g = (lambda: 0).__globals__",
        "s = '{0.__class__}'.format(1)",
        "v = getattr(object, '__subclasses__')",
    ],
)
def test_static_checks_refuse_escapes(snippet):
    assert find_problems(snippet), snippet


def test_static_checks_name_every_problem_with_its_line_breadth_first():
    source = (
        "def outer():\n"
        "    def inner():\n"
        "        import os\n"
        "        return getattr(inner, '__globals__')\n"
        "    return inner().__class__\n"
        "from . import sibling\n"
        "from socket import socket\n"
        "x = eval('{0.__class__}'.format(1))\n"
    )
    assert find_problems(source) == [
        "line 6: relative imports are not allowed",
        "line 7: import from 'socket' is not allowed",
        "line 3: import of 'os' is not allowed",
        "line 5: access to attribute '__class__' is not allowed",
        "line 8: use of 'eval' is not allowed",
        "line 4: getattr() of '__globals__' is not allowed",
        "line 8: format strings may not reach private attributes",
    ]


async def test_statically_refused_environment_never_runs(pool):
    code = "import os\n\nclass Bad:\n    def __init__(self, init_config: dict):\n        os.system('true')\n"
    environment = Environment(id="bad", name="Bad", class_name="Bad", code=code, tools=[])
    with pytest.raises(EnvironmentLoadError, match="import of 'os'"):
        await pool.open_session(environment, {})


async def test_constructor_that_raises_is_a_load_error(pool):
    code = "class Broken:\n    def __init__(self, init_config: dict):\n        raise KeyError('missing')\n"
    environment = Environment(id="broken", name="Broken", class_name="Broken", code=code, tools=[])
    with pytest.raises(EnvironmentLoadError, match="KeyError"):
        await pool.open_session(environment, {})


CYCLES = '''
KEPT = []  # outside the state: rings are not JSON


class Cycles:
    def __init__(self, init_config: dict):
        # Built while the session opens (the collector paused): cycles that live, and one the constructor drops.
        self.rings = init_config.get("rings", 0)
        for index in range(self.rings):
            ring = {"index": index}
            ring["self"] = ring
            KEPT.append(ring)
        dropped = {}
        dropped["self"] = dropped

    def make_garbage(self, rounds: int) -> dict:
        """Make ``rounds`` reference cycles of 1 KB each and drop them: only the cyclic collector frees them."""
        for _ in range(rounds):
            ring = [bytes(1000)]
            ring.append(ring)
        return {"success": True, "rings": sum(1 for ring in KEPT if ring["self"] is ring)}
'''


async def test_a_session_still_collects_cyclic_garbage_after_its_open():
    """A session opens without the cyclic collector (see ``runtime.serve_session``); its calls run with it. Here a
    call makes about 6 GB of cycles in total, 24 times the memory limit: it finishes only if they are collected."""
    environment = Environment(
        id="cycles", name="Cycles", class_name="Cycles", code=CYCLES, tools=derive_tools(CYCLES, "Cycles")
    )
    limits = SandboxLimits(call_timeout_s=60.0, kill_grace_s=0.5, memory_mb=256)
    async with JailSpec(workers=1, limits=limits).pool() as pool:
        session = await pool.open_session(environment, {"rings": 20_000})
        for _ in range(3):
            observation, _ = await session.call(call("make_garbage", rounds=2_000_000))
            assert observation.kind == ObservationKind.OK, observation
            assert observation.content == {"success": True, "rings": 20_000}
        await session.close()
