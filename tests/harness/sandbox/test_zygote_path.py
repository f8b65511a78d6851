"""The zygote imports the sandbox's own code, never a package of the same name in the harness's current folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.sandbox import JailSpec
from harness.schema import Environment, ToolCall
from harness.toolspec import derive_tools

CODE = "class Counter:\n    def __init__(self, init_config: dict):\n        self.hits = 0\n\n    def hit(self) -> dict:\n        self.hits += 1\n        return {'hits': self.hits}\n"


async def test_a_harness_package_in_the_current_folder_never_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    marker = tmp_path / "ran"
    planted = tmp_path / "folder" / "harness"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.chdir(planted.parent)
    environment = Environment(
        id="counter", name="Counter", class_name="Counter", code=CODE, tools=derive_tools(CODE, "Counter")
    )
    async with JailSpec().pool() as pool:
        session = await pool.open_session(environment, {})
        observation, _ = await session.call(ToolCall(id="c", name="hit", arguments={}))
        await session.close()
    assert observation.content == {"hits": 1}
    assert not marker.exists(), "the planted package ran in the zygote"
