"""A library whose environment raises what is not an ``Exception``: ``SystemExit``, ``KeyboardInterrupt``,
``GeneratorExit`` and a ``BaseException`` subclass of its own, from its tools, its constructor and its checks.

Each is the environment's failure, never the sandbox's: a raising tool is a tool error the agent sees (or ends the
episode as the rules say a raising tool does), a raising constructor is an environment that cannot be loaded, a
raising check counts as failed with its reason. ``calls`` counts the raising tools' calls: each one changes the
state before it raises, so a final state with ``calls == 4`` shows the session went on in one piece.
"""

from __future__ import annotations

from pathlib import Path

from harness.library import write_seed_layout
from harness.sandbox import find_problems
from harness.schema import Check, Environment, ReferenceAction, Scenario
from harness.toolspec import derive_tools

ENV_ID = "raising"

CODE = '''
class Stop(BaseException):
    """The environment's own BaseException (not an Exception)."""


def _raise(what: str) -> None:
    if what == "system_exit":
        raise SystemExit(3)
    if what == "keyboard_interrupt":
        raise KeyboardInterrupt("interrupted")
    if what == "generator_exit":
        raise GeneratorExit("closed")
    raise Stop("stopped")


class Raising:
    def __init__(self, init_config: dict):
        self.done = init_config.get("done", False)
        self.calls = init_config.get("calls", 0)
        if init_config.get("raise_at_load"):
            _raise(init_config["raise_at_load"])

    def exit_now(self) -> dict:
        """Raise SystemExit."""
        self.calls += 1
        _raise("system_exit")
        return {"success": True}

    def interrupt(self) -> dict:
        """Raise KeyboardInterrupt."""
        self.calls += 1
        _raise("keyboard_interrupt")
        return {"success": True}

    def close_generator(self) -> dict:
        """Raise GeneratorExit."""
        self.calls += 1
        _raise("generator_exit")
        return {"success": True}

    def stop(self) -> dict:
        """Raise the environment's own BaseException."""
        self.calls += 1
        _raise("stop")
        return {"success": True}

    def complete(self) -> dict:
        """Complete the task."""
        self.done = True
        return {"success": True, "data": self.calls}
'''

RAISING_TOOLS = {
    "exit_now": "SystemExit: 3",
    "interrupt": "KeyboardInterrupt: interrupted",
    "close_generator": "GeneratorExit: closed",
    "stop": "Stop: stopped",
}
"""Each raising tool and the start of the error it gives."""

LOADS = {
    "system_exit": "SystemExit: 3",
    "keyboard_interrupt": "KeyboardInterrupt: interrupted",
    "generator_exit": "GeneratorExit: closed",
    "stop": "Stop: stopped",
}
"""What the constructor raises in each ``raises-on-load-*`` scenario, and the start of its error."""

RAISING_CHECKS = {
    "check-system-exit": ("raise SystemExit(4)", "SystemExit: 4"),
    "check-keyboard-interrupt": ("raise KeyboardInterrupt('no')", "KeyboardInterrupt: no"),
    "check-generator-exit": ("raise GeneratorExit('no')", "GeneratorExit: no"),
    "check-custom": ("raise type('Halt', (BaseException,), {})('no')", "Halt: no"),
}
"""Checks that raise instead of answering: each counts as failed, with its error recorded."""

TOOLS_SCENARIO = "raising-tools"
CHECKS = [
    Check(id="done", description="finished", source="def check(initial, final):\n    return final['done'] is True\n"),
    Check(id="calls", description="four calls", source="def check(initial, final):\n    return final['calls'] == 4\n"),
    *(
        Check(id=check_id, description="raises", source=f"def check(initial, final):\n    {statement}\n")
        for check_id, (statement, _) in RAISING_CHECKS.items()
    ),
]


def environment() -> Environment:
    assert not find_problems(CODE), find_problems(CODE)
    return Environment(id=ENV_ID, name="Raising", class_name="Raising", code=CODE, tools=derive_tools(CODE, "Raising"))


def scenarios() -> list[Scenario]:
    tools = Scenario(
        id=TOOLS_SCENARIO,
        environment_id=ENV_ID,
        initial_state={"done": False, "calls": 0},
        task="Call every tool, then complete the task.",
        checks=CHECKS,
        reference_actions=[ReferenceAction(name=name) for name in [*RAISING_TOOLS, "complete"]],
    )
    loads = [
        Scenario(
            id=f"raises-on-load-{what.replace('_', '-')}",
            environment_id=ENV_ID,
            initial_state={"done": False, "calls": 0, "raise_at_load": what},
            task="Complete the task.",
            checks=CHECKS[:1],
            reference_actions=[ReferenceAction(name="complete")],
        )
        for what in LOADS
    ]
    return [tools, *loads]


def write_raising_library(root: Path) -> Path:
    for check in CHECKS:
        assert not find_problems(check.source), (check.id, find_problems(check.source))
    write_seed_layout([environment()], scenarios(), root)
    return root
