"""What a model call through ``harness.llm`` costs on top of a raw HTTP request.

The mock OpenAI-compatible server runs in a separate process (so its CPU is not counted here). Measured:

1. one request at a time, 0 ms server latency: wall and CPU milliseconds per call for a raw aiohttp POST,
   a bare ``litellm.acompletion`` (litellm's own clients), and ``LLMClient.chat`` without and with tools;
   our overhead is ``LLMClient.chat`` minus raw;
2. 200 concurrent callers, 0 ms latency: throughput and CPU per call, and how many connections the server saw;
3. 200 concurrent callers, 100 ms latency: throughput against the latency bound, the largest number of
   requests the server had in flight, and its connection count (is the client pool the limit?);
4. with ``--local``: the embedded model's generation speed (tokens per second) through ``LLMClient``.

Run: ``python bench/llm_overhead.py [--calls 1000] [--concurrency 200] [--local]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.llm import EndpointLimits, LLMClient, ModelSettings  # noqa: E402
from harness.llm.litellm_setup import litellm_module  # noqa: E402
from harness.llm.openai_http import ROUTE_VARIABLE  # noqa: E402
from harness.llm.transport import DIRECT_ROUTE_VARIABLE  # noqa: E402

MESSAGES = [
    {"role": "system", "content": "You are a careful assistant for an order system. " * 10},
    {"role": "user", "content": "Where is my order O-1?"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "Looks something up.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    }
    for i in range(15)
]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def mock_server(latency: float) -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.doubles.mock_openai", "--latency", str(latency)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdin is not None
    line = process.stdout.readline()
    if not line.startswith("READY "):
        process.kill()
        raise RuntimeError(f"mock server did not start: {line!r}")
    try:
        yield line.split()[1]
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


async def server_stats(session: aiohttp.ClientSession, base_url: str, reset: bool = False) -> dict[str, int]:
    if reset:
        async with session.post(f"{base_url}/_reset") as response:
            await response.read()
        return {}
    async with session.get(f"{base_url}/_stats") as response:
        return orjson.loads(await response.read())


Call = Callable[[], Awaitable[object]]


async def sequential(name: str, call: Call, calls: int) -> tuple[float, float]:
    for _ in range(min(50, calls)):
        await call()
    wall, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(calls):
        await call()
    wall_ms = (time.perf_counter() - wall) / calls * 1000
    cpu_ms = (cpu_seconds() - cpu) / calls * 1000
    print(f"  {name:44s} {wall_ms:7.2f} ms wall  {cpu_ms:7.2f} ms CPU  per call")
    return wall_ms, cpu_ms


async def concurrent(call: Call, calls: int, concurrency: int) -> tuple[float, float]:
    semaphore = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with semaphore:
            await call()

    wall, cpu = time.perf_counter(), cpu_seconds()
    await asyncio.gather(*(one() for _ in range(calls)))
    elapsed = time.perf_counter() - wall
    return calls / elapsed, (cpu_seconds() - cpu) / calls * 1000


async def measure_overhead(base_url: str, calls: int, concurrency: int) -> None:
    stats_session = aiohttp.ClientSession()
    raw_session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    client = LLMClient(default_limits=EndpointLimits(concurrency=None), timeout=60)
    body = orjson.dumps({"model": "echo", "messages": MESSAGES})
    headers = {"Content-Type": "application/json", "Authorization": "Bearer x"}

    async def raw() -> None:
        async with raw_session.post(f"{base_url}/chat/completions", data=body, headers=headers) as response:
            orjson.loads(await response.read())

    async def bare_litellm() -> None:
        await litellm_module().acompletion(
            model="hosted_vllm/echo", api_base=base_url, messages=MESSAGES, max_retries=0
        )

    plain = ModelSettings(model="hosted_vllm/echo", extra={"api_base": base_url})
    with_tools = ModelSettings(model="hosted_vllm/bad-tool", extra={"api_base": base_url})

    async def ours() -> None:
        await client.chat(plain, MESSAGES)

    async def ours_tools() -> None:
        result = await client.chat(with_tools, MESSAGES, tools=TOOLS)
        assert result.message.get("tool_calls"), result.message

    async def run_concurrent(name: str, call: Call) -> None:
        await server_stats(stats_session, base_url, reset=True)
        throughput, cpu_ms = await concurrent(call, calls * 2, concurrency)
        stats = await server_stats(stats_session, base_url)
        print(
            f"  {name:44s} {throughput:7.0f} calls/s  {cpu_ms:5.2f} ms CPU per call  "
            f"server: {stats['max_in_flight']} in flight at most, {stats['connections_total']} connections opened"
        )

    print(f"\n[1] one call at a time, 0 ms latency ({calls} calls each)")
    raw_wall, raw_cpu = await sequential("raw aiohttp POST", raw, calls)
    await sequential("litellm.acompletion (litellm's own clients)", bare_litellm, calls)
    ours_wall, ours_cpu = await sequential("LLMClient.chat", ours, calls)
    tools_wall, tools_cpu = await sequential("LLMClient.chat, 15 tools, tool-call reply", ours_tools, calls)
    os.environ[ROUTE_VARIABLE] = "litellm"  # read on every call
    await sequential("  the same through litellm's HTTP route", ours_tools, calls)
    os.environ[DIRECT_ROUTE_VARIABLE] = "False"  # litellm reads it on every call
    await sequential("  the same through litellm's OpenAI SDK route", ours_tools, calls)
    os.environ[DIRECT_ROUTE_VARIABLE] = "True"
    os.environ.pop(ROUTE_VARIABLE)
    print(f"  overhead of LLMClient.chat over raw: {ours_wall - raw_wall:.2f} ms wall, {ours_cpu - raw_cpu:.2f} ms CPU")
    print(
        f"  with 15 tools and a tool call:        {tools_wall - raw_wall:.2f} ms wall, {tools_cpu - raw_cpu:.2f} ms CPU"
    )

    print(f"\n[2] {concurrency} concurrent callers, 0 ms latency ({calls * 2} calls each)")
    await run_concurrent("raw aiohttp POST", raw)
    await raw_session.close()
    await run_concurrent("LLMClient.chat", ours)
    await client.aclose()
    await stats_session.close()


async def measure_pool(base_url: str, latency: float, calls: int, concurrency: int) -> None:
    session = aiohttp.ClientSession()
    client = LLMClient(default_limits=EndpointLimits(concurrency=None), timeout=60)
    settings = ModelSettings(model="hosted_vllm/echo", extra={"api_base": base_url})
    await client.chat(settings, MESSAGES)
    await server_stats(session, base_url, reset=True)

    async def ours() -> None:
        await client.chat(settings, MESSAGES)

    throughput, cpu_ms = await concurrent(ours, calls, concurrency)
    stats = await server_stats(session, base_url)
    bound = concurrency / latency
    print(f"\n[3] {concurrency} concurrent callers, {latency * 1000:.0f} ms latency ({calls} calls)")
    print(
        f"  LLMClient.chat: {throughput:.0f} calls/s ({throughput / bound:.0%} of the {bound:.0f}/s latency bound), "
        f"{cpu_ms:.2f} ms CPU per call"
    )
    print(
        f"  server: at most {stats['max_in_flight']} requests in flight, {stats['max_open_connections']} connections "
        f"open at once, {stats['connections_total']} opened in all"
    )
    await client.aclose()
    await session.close()


async def measure_local(calls: int) -> None:
    client = LLMClient(timeout=600)
    settings = ModelSettings(model="local", temperature=0.0, max_tokens=96, seed=0)
    messages = [{"role": "user", "content": "Write two sentences about the sea."}]
    print(f"\n[4] embedded model through LLMClient ({calls} calls, max_tokens=96)")
    started = time.perf_counter()
    await client.chat(settings, messages)
    print(f"  first call (loads the model): {time.perf_counter() - started:.1f} s")
    tokens, seconds = 0, 0.0
    for i in range(calls):
        result = await client.chat(settings.model_copy(update={"seed": i + 1}), messages, role="bench")
        tokens += result.usage.completion_tokens
        seconds += result.usage.model_seconds
    print(f"  {tokens} tokens generated in {seconds:.2f} s: {tokens / seconds:.1f} tokens/s (prompt included)")
    await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.1, help="server latency for [3], seconds")
    parser.add_argument("--local", action="store_true", help="also measure the embedded model")
    parser.add_argument("--local-calls", type=int, default=5)
    args = parser.parse_args()

    versions = ", ".join(f"{name} {metadata.version(name)}" for name in ("litellm", "openai", "aiohttp", "httpx"))
    print(f"{versions}, python {sys.version.split()[0]}")
    with mock_server(0.0) as base_url:
        asyncio.run(measure_overhead(base_url, args.calls, args.concurrency))
    with mock_server(args.latency) as base_url:
        asyncio.run(measure_pool(base_url, args.latency, args.calls * 2, args.concurrency))
    if args.local:
        asyncio.run(measure_local(args.local_calls))


if __name__ == "__main__":
    main()
