"""Tool sessions for environments that take every call through one dispatcher method.

An environment with ``call_dispatcher`` set (a benchmark's imported classes) receives each call unvalidated, as
``dispatcher(name=..., arguments={...})``, and decides itself what an unknown name or wrong arguments give: the
sandbox's schema check and its integer coercion are bypassed, so ``30.0`` reaches the method as ``30.0``.
"""

from __future__ import annotations

from typing import Any

import orjson

from harness.rules.protocols import ToolSession
from harness.sandbox import SandboxPool
from harness.schema import (
    DiffEntry,
    Environment,
    FunctionSpec,
    Observation,
    ObservationKind,
    ToolCall,
    ToolSpec,
)


def dispatcher_environment(environment: Environment) -> Environment:
    """The environment as the sandbox sees it: one tool, the dispatcher, taking a name and an arguments object."""
    assert environment.call_dispatcher is not None
    tool = ToolSpec(
        function=FunctionSpec(
            name=environment.call_dispatcher,
            description="Runs one tool call.",
            parameters={
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "arguments": {"type": "object"},
                    "requestor": {"type": "string"},
                },
                "required": ["name", "arguments"],
            },
        )
    )
    return environment.model_copy(update={"tools": [tool]})


class DispatchSession:
    """A :class:`~harness.rules.protocols.ToolSession` that sends each call through the environment's dispatcher.

    Results that are the JSON text of an object are shown to the agent as that object; :meth:`call_raw` gives
    the dispatcher's result exactly as returned.
    """

    def __init__(self, inner: ToolSession, dispatcher: str):
        self.inner = inner
        self.dispatcher = dispatcher

    async def call_raw(self, call: ToolCall, requestor: str | None = None) -> Observation:
        """Run ``call`` and return the dispatcher's own result (or the sandbox's error observation). A
        ``requestor`` (dual control: ``user``) is passed to the dispatcher, which runs the call on that side."""
        arguments: dict[str, Any] = {"name": call.name, "arguments": call.arguments}
        if requestor is not None:
            arguments["requestor"] = requestor
        observation, _ = await self.inner.call(ToolCall(id=call.id, name=self.dispatcher, arguments=arguments))
        return observation.model_copy(update={"name": call.name})

    async def call_as_user(self, call: ToolCall) -> tuple[Observation, list[DiffEntry]]:
        """A call of the simulated user's (dual control): its result as the dispatcher wrote it, and its diff."""
        if call.arguments is None:
            return await self.call(call)
        arguments = {"name": call.name, "arguments": call.arguments, "requestor": "user"}
        observation, diff = await self.inner.call(ToolCall(id=call.id, name=self.dispatcher, arguments=arguments))
        return observation.model_copy(update={"name": call.name}), diff

    async def call(self, call: ToolCall) -> tuple[Observation, list[DiffEntry]]:
        if call.arguments is None:
            raw = (call.raw_arguments or "")[:200]
            observation = Observation(
                tool_call_id=call.id,
                name=call.name,
                kind=ObservationKind.INVALID_ARGUMENTS,
                error=f"The arguments for {call.name!r} are not a JSON object: {raw!r}.",
            )
            return observation, []
        wrapped = ToolCall(id=call.id, name=self.dispatcher, arguments={"name": call.name, "arguments": call.arguments})
        observation, diff = await self.inner.call(wrapped)
        return observation.model_copy(update={"name": call.name, "content": _readable(observation.content)}), diff

    async def state(self, *, shared: bool = False) -> dict[str, Any]:
        return await self.inner.state(shared=shared)

    async def close(self) -> None:
        await self.inner.close()


def _readable(content: Any) -> Any:
    if isinstance(content, str) and content.startswith("{"):
        try:
            value = orjson.loads(content)
        except orjson.JSONDecodeError:
            return content
        if isinstance(value, dict):
            return value
    return content


async def open_tool_session(
    pool: SandboxPool,
    environment: Environment,
    initial_state: dict[str, Any],
    *,
    seed: int = 0,
    record_diffs: bool = True,
) -> ToolSession:
    """The session an episode works in: the sandbox's own, or a dispatching one when the environment asks."""
    if environment.call_dispatcher is None:
        return await pool.open_session(environment, initial_state, seed=seed, record_diffs=record_diffs)
    inner = await pool.open_session(
        dispatcher_environment(environment), initial_state, seed=seed, record_diffs=record_diffs
    )
    return DispatchSession(inner, environment.call_dispatcher)
