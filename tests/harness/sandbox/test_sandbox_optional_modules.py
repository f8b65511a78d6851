"""Optional third-party modules (pydantic for τ²-bench, mpmath for BFCL) are loaded by a pool's zygotes only when
the code it runs names them: a child can import exactly those, and a run of code that names none pays for none."""

from __future__ import annotations

from pathlib import Path

from harness.library import load_library
from harness.registry import jail_modules
from harness.sandbox import JailSpec
from harness.sandbox.policy import optional_modules_named_in as named_in
from harness.schema import Environment, ObservationKind, ToolCall
from harness.toolspec import derive_tools

REPO = Path(__file__).resolve().parents[3]

MODELS = '''
class Models:
    def __init__(self, init_config: dict):
        self.count = init_config.get("count", 0)

    def validated(self, value: int) -> dict:
        """Validate a value with a pydantic model.

        Args:
            value: The value.
        """
        import pydantic

        class Item(pydantic.BaseModel):
            value: int

        return {"success": True, "data": Item(value=value).model_dump()}
'''


def models() -> Environment:
    return Environment(
        id="models", name="Models", class_name="Models", code=MODELS, tools=derive_tools(MODELS, "Models")
    )


OPTIONAL_MODULES = jail_modules()


def optional_modules_named_in(sources: list[str]) -> frozenset[str]:
    return named_in(sources, OPTIONAL_MODULES)


def test_the_modules_named_are_found_in_imports_and_in_strings_and_nowhere_else():
    pydantic_family = {name for name in OPTIONAL_MODULES if name.split(".")[0] == "pydantic"}
    assert optional_modules_named_in(["from pydantic import BaseModel\n"]) == pydantic_family
    assert optional_modules_named_in(["loader('mpmath')"]) == {"mpmath"}
    assert optional_modules_named_in(["import math\nmy_pydantic_like = 1\n", "# no imports"]) == frozenset()
    seed = load_library(str(REPO / "datasets" / "seed"))
    assert seed.optional_modules() == frozenset()


async def test_a_child_imports_an_optional_module_only_when_its_pool_was_told_to_load_it():
    call = ToolCall(id="c1", name="validated", arguments={"value": 3})
    async with JailSpec(optional_modules=optional_modules_named_in([MODELS])).pool() as pool:
        session = await pool.open_session(models(), {})
        observation, _ = await session.call(call)
        await session.close()
    assert observation.kind is ObservationKind.OK, observation.error
    assert observation.content == {"success": True, "data": {"value": 3}}

    async with JailSpec(optional_modules=()).pool() as pool:
        session = await pool.open_session(models(), {})
        observation, _ = await session.call(call)
        await session.close()
    assert observation.kind is not ObservationKind.OK
    assert "pydantic" in (observation.error or "")
