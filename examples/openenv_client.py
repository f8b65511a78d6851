"""Drive an environment served by ``harness serve ENV --protocol openenv`` with OpenEnv 0.10's own client.

Run it with a Python that has ``openenv==0.10.0`` (not the project's venv: openenv pins ``fastmcp<4``):

    harness serve banking --protocol openenv --port 8765 &   # its first line: http://127.0.0.1:8765/<token>
    python examples/openenv_client.py --url http://127.0.0.1:8765/<token> --env banking

The URL is the one the server printed first: its credential is the path's first segment.

It takes the first scenario from OpenEnv's task API, resets to it, lists the tools, reads one account, ends the
episode with the ``finish`` tool and prints the reward the jailed checks gave (0.0 here: nothing was done).
"""

from __future__ import annotations

import argparse
import json
import urllib.request

from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.mcp_client import MCPToolClient


def first_task(url: str, env: str) -> dict:
    request = urllib.request.Request(
        f"{url}/{env}/task",
        data=json.dumps({"split": "test", "index": 0}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        return json.load(response)["task"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the URL harness serve printed first (credential included)")
    parser.add_argument("--env", default="banking")
    args = parser.parse_args()

    task = first_task(args.url, args.env)
    with MCPToolClient(base_url=args.url).sync() as env:
        opened = env.reset(scenario_id=task["scenario_id"], seed=0)
        print("task:", opened.observation.task)
        tools = env.list_tools()
        print("tools:", ", ".join(tool.name for tool in tools))
        if any(tool.name == "get_account" for tool in tools):
            print("get_account:", env.call_tool("get_account", account_id="AC-1001"))
        ended = env.step(CallToolAction(tool_name="finish", arguments={"answer": "Done."}))
        print(f"done={ended.done} reward={ended.reward} ({ended.observation.metadata.get('termination')})")


if __name__ == "__main__":
    main()
