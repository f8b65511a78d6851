"""Runs under the OpenEnv 0.10 client venv (not the project's): drives ``harness serve --protocol openenv``
with OpenEnv's own ``MCPToolClient`` and prints what it saw as one JSON document.

Usage: ``python openenv_driver.py BASE_URL PROGRAM_JSON [HEADERS_JSON]``. The program is a list of ``[client, operation]``
pairs; each client is its own ``MCPToolClient`` (its own OpenEnv session), so interleaved operations of two
clients run against two concurrent sessions. A failing operation is recorded as ``{"error": ...}``. The headers
(an object) go with every request of every client.
"""

import contextlib
import json
import sys

from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.mcp_client import MCPToolClient


def observation_of(result):
    observation = result.observation
    return {
        "observation": observation.model_dump(mode="json"),
        "reward": result.reward,
        "done": result.done,
    }


def run(client, operation):
    kind = operation["op"]
    if kind == "connect":
        client.connect()
        return {"connected": True}
    if kind == "reset":
        return observation_of(client.reset(**operation.get("kwargs", {})))
    if kind == "list_tools":
        return [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in client.list_tools()
        ]
    if kind == "list_tools_step":
        return observation_of(client.step(ListToolsAction()))
    if kind == "call":
        return {"result": client.call_tool(operation["name"], **operation.get("arguments", {}))}
    if kind == "step":
        action = CallToolAction(tool_name=operation["name"], arguments=operation.get("arguments", {}))
        return observation_of(client.step(action))
    if kind == "state":
        return client.state().model_dump(mode="json")
    if kind == "close":
        client.close()
        return {"closed": True}
    raise ValueError(f"unknown operation {kind!r}")


def main():
    base_url, program = sys.argv[1], json.loads(sys.argv[2])
    headers = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    clients = {}
    report = []
    for client_index, operation in program:
        if client_index not in clients:
            clients[client_index] = MCPToolClient(
                base_url=base_url, message_timeout_s=300, headers=headers or None
            ).sync()
        try:
            report.append(run(clients[client_index], operation))
        except Exception as exc:
            report.append({"error": f"{type(exc).__name__}: {exc}"})
    for client in clients.values():
        with contextlib.suppress(Exception):
            client.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
