"""Shared HTTP clients for OpenAI-compatible endpoints (``openai/...``, ``hosted_vllm/...``).

One aiohttp connection pool per :class:`~harness.llm.client.LLMClient` (sized for the runner's concurrency,
keep-alive) is handed to litellm on every call, so litellm neither builds nor looks up clients per request.

litellm 1.79.3 has two routes to an OpenAI-compatible endpoint: through the OpenAI SDK (its default), or
through its own HTTP handler (``EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER=True``), which skips the SDK's
per-request walk over every message and tool schema and costs about 40% less CPU per call. We take the
direct route (set in :mod:`harness.llm.litellm_setup`) unless ``HARNESS_LITELLM_OPENAI_SDK=1``; each route needs
its own kind of client, built here. With the SDK route its own retries are switched off (ours own the schedule).
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

import aiohttp
import httpx

if TYPE_CHECKING:  # both load litellm or the OpenAI SDK, which only a call through litellm needs
    import openai
    from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

DIRECT_ROUTE_VARIABLE = "EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER"

# Providers litellm sends through its OpenAI route, with where their key comes from and the key to send
# when none is configured (vLLM ignores it).
OPENAI_COMPATIBLE: dict[str, tuple[tuple[str, ...], str | None]] = {
    "hosted_vllm": (("HOSTED_VLLM_API_KEY",), "fake-api-key"),
    "openai": (("OPENAI_API_KEY",), None),
}


def direct_route() -> bool:
    from litellm.secret_managers.main import get_secret_bool

    return bool(get_secret_bool(DIRECT_ROUTE_VARIABLE))


def api_key_for(provider: str, api_key_env: str | None, api_base: str | None) -> str | None:
    """The key to send: from the alias's ``api_key_env``, else the provider's usual variable, else a
    stand-in key for servers that need none (any api_base other than OpenAI's)."""
    if api_key_env:
        return os.environ.get(api_key_env)
    variables, default_key = OPENAI_COMPATIBLE.get(provider, ((), None))
    for variable in variables:
        value = os.environ.get(variable)
        if value:
            return value
    if default_key is None and api_base and "api.openai.com" not in api_base:
        return "EMPTY"
    return default_key


class OpenAIClientPool:
    """Creates clients lazily inside the running event loop; ``aclose`` releases every connection."""

    def __init__(self, *, max_connections: int, keepalive_seconds: float = 120.0) -> None:
        self.max_connections = max_connections
        self.keepalive_seconds = keepalive_seconds
        self._session: aiohttp.ClientSession | None = None
        self._handler: AsyncHTTPHandler | None = None
        self._sdk_clients: dict[tuple[str, str], openai.AsyncOpenAI] = {}

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.max_connections,
                limit_per_host=0,
                keepalive_timeout=self.keepalive_seconds,
                ttl_dns_cache=300,
            )
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def session(self) -> aiohttp.ClientSession:
        """The shared connection pool (used by the direct OpenAI-compatible route)."""
        return self._get_session()

    def client_for(self, api_base: str, api_key: str) -> AsyncHTTPHandler | openai.AsyncOpenAI:
        """The client to pass to ``litellm.acompletion(client=...)`` for this endpoint."""
        if direct_route():
            from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

            if self._handler is None:
                self._handler = AsyncHTTPHandler(timeout=httpx.Timeout(None), shared_session=self._get_session())
            return self._handler
        key = (api_base, hashlib.sha256(api_key.encode()).hexdigest())
        client = self._sdk_clients.get(key)
        if client is None:
            import openai
            from litellm.llms.custom_httpx.aiohttp_transport import LiteLLMAiohttpTransport

            http_client = httpx.AsyncClient(
                transport=LiteLLMAiohttpTransport(client=self._get_session()), timeout=httpx.Timeout(None)
            )
            # openai 3.x is typed for httpx2 but accepts a legacy httpx client, which litellm's transport needs.
            client = openai.AsyncOpenAI(
                api_key=api_key,
                base_url=api_base,
                http_client=http_client,  # type: ignore[arg-type]  # a legacy httpx client, see above
                max_retries=0,
            )
            self._sdk_clients[key] = client
        return client

    async def aclose(self) -> None:
        handler, self._handler = self._handler, None
        clients, self._sdk_clients = list(self._sdk_clients.values()), {}
        if handler is not None:
            await handler.close()
        for client in clients:
            await client.close()
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    def forget(self) -> None:
        """Drop clients bound to an event loop that is gone (they cannot be closed from another loop)."""
        self._handler = None
        self._sdk_clients = {}
        self._session = None
