"""Environment synthesis with the embedded local model (Gemma 3 270M): its answers are gated, never trusted.

Slow (the model runs on CPU), so one task and a two-operation plan.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from harness.llm import LLMClient
from harness.sandbox import JailSpec
from harness.schema import Environment, ModelSettings, Usage
from synth.answers import Asker
from synth.discovery import judge_task
from synth.modeling import ModelingError, assemble, check_method, load_check, write_methods
from synth.pipeline import SynthEnvsConfig, synthesize_environments
from synth.records import EnvironmentPlan
from tests.doubles.scripted_synth import INITIAL_STATE, permit_plan

pytestmark = pytest.mark.local_model

TASK = "Please cancel my parking permit P-1, I moved to another city."


def tiny_plan() -> EnvironmentPlan:
    data = permit_plan(None)
    data["operations"] = [o for o in data["operations"] if o["name"] in ("get_permit", "cancel_permit")]
    return EnvironmentPlan.model_validate(data)


@pytest.fixture
async def client() -> AsyncIterator[LLMClient]:
    llm = LLMClient()
    try:
        yield llm
    finally:
        await llm.aclose()


async def test_discovery_and_modeling_by_the_embedded_model_are_gated(client: LLMClient, tmp_path: Path) -> None:
    asker = Asker(client, ModelSettings(model="local", temperature=0.0, max_tokens=200), retries=0)
    usage = Usage()

    outcome = await judge_task(asker, TASK, usage)
    assert 1 <= usage.requests <= 2
    if outcome.keep:
        assert outcome.description is not None and len(outcome.description) >= 20  # passed the answer schema
    else:
        assert outcome.reason  # dropped with the model's reason, or refused as an unusable answer
        assert outcome.error is None or "no valid" in outcome.error

    plan = tiny_plan()
    async with JailSpec(workers=1).pool() as pool:
        try:
            methods = await write_methods(asker, plan, plan.operations, usage, attempts=2)
        except ModelingError as rejected:
            refused = [a for a in rejected.attempts if a.problems]
            assert refused, "a rejection must come from refused attempts"
            assert all(a.attempt <= 2 for a in rejected.attempts)
            assert str(rejected).startswith("method ")
        else:
            for name, method in methods.items():
                operation = plan.operation(name)
                assert operation is not None
                assert check_method(method.source, operation, plan)[1] == []
            code = assemble(plan, methods)
            environment = Environment(id="local", name="local", class_name=plan.class_name, code=code)
            await load_check(pool, environment, INITIAL_STATE)

        # The same model through the whole pipeline: nothing unchecked comes out.
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text('{"task": "' + TASK + '"}\n')
        config = SynthEnvsConfig(
            source=str(tasks),
            model="local",
            out=tmp_path / "out",
            rounds=3,
            answer_retries=0,
            method_attempts=1,
            repairs=0,
            max_tokens=200,
        )
        result = await synthesize_environments(config, client=client, pool=pool)
    assert len(result.discovery) == 1
    assert len(result.accepted) + len(result.rejected) == len(result.themes)
    assert result.costs.total.requests >= 1
    # A 270M base model cannot write an environment that passes every gate: the run ends in rejections that
    # say where and why (or, if the task was dropped, in the filter's reason), never in an accepted environment.
    assert result.accepted == []
    if result.themes:
        [rejection] = result.rejected
        assert rejection.stage in ("planning", "modeling", "assessment", "repair", "validation")
        assert len(rejection.reason) > 10
    else:
        assert not result.discovery[0].keep and result.discovery[0].reason
