"""OpenEnv's task API for the one environment a server offers: ``GET /{env}/splits``, ``POST /{env}/tasks``,
``/num_tasks``, ``/task`` and ``/task_range``. The library has no splits: every scenario the server offers is in the
one split :data:`SPLIT`. A bad body or field is answered 400 with ``{"detail": ...}``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from harness.schema import Environment, Scenario
from harness.train.openenv_wire import MalformedRequest, TaskQuery, decode_request, first_error, shown

SPLIT = "test"


class TaskRefused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def task_record(scenario: Scenario) -> dict[str, Any]:
    return {
        "task_id": scenario.id,
        "scenario_id": scenario.id,
        "task": scenario.task,
        "difficulty": scenario.difficulty,
        "tags": list(scenario.tags),
    }


class TaskApi:
    """The task routes of ``environment``, listing ``scenarios()`` (the scenarios the server offers)."""

    def __init__(self, environment: Environment, scenarios: Callable[[], list[Scenario]]) -> None:
        self.environment = environment
        self.scenarios = scenarios

    def _tasks_of(self, env_name: str, split: Any) -> list[Scenario]:
        if env_name.lower() != self.environment.id.lower():
            raise TaskRefused(404, f"unknown environment {shown(env_name)}")
        if split != SPLIT:
            raise TaskRefused(400, f"unknown split {shown(split)}; this server has one: {SPLIT!r}")
        return self.scenarios()

    async def endpoint(self, request: Request) -> Response:
        env_name = request.path_params["env_name"]
        operation = request.path_params["operation"]
        try:
            if operation == "splits" and request.method == "GET":
                self._tasks_of(env_name, SPLIT)
                return JSONResponse([{"name": SPLIT, "type": SPLIT}])
            query = await _task_query(request)
            scenarios = self._tasks_of(env_name, query.split)
            if operation == "tasks":
                return JSONResponse({"tasks": [task_record(s) for s in scenarios], "env_name": self.environment.id})
            if operation == "num_tasks":
                return JSONResponse({"num_tasks": len(scenarios)})
            if operation == "task":
                index = query.index
                if index is None or not -len(scenarios) <= index < len(scenarios):
                    raise TaskRefused(400, "Invalid task index")
                return JSONResponse({"task": task_record(scenarios[index])})
            if operation == "task_range":
                chosen = scenarios[slice(query.start, query.stop)]
                return JSONResponse({"tasks": [task_record(s) for s in chosen]})
            raise TaskRefused(404, f"no task operation {shown(operation)}")
        except TaskRefused as exc:
            return JSONResponse({"detail": exc.detail}, status_code=exc.status)


async def _task_query(request: Request) -> TaskQuery:
    try:
        body = decode_request(await request.body() or b"{}")
    except MalformedRequest as exc:
        raise TaskRefused(400, f"invalid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise TaskRefused(400, "the request body must be a JSON object")
    try:
        return TaskQuery.model_validate(body)
    except ValidationError as exc:
        raise TaskRefused(400, f"invalid task request: {first_error(exc)}") from None


__all__ = ["SPLIT", "TaskApi", "TaskRefused", "task_record"]
