"""Before a run: is a model string routable at all, and does its endpoint answer?

:func:`route_problem` says why a model string cannot be sent anywhere (neither an alias nor a litellm route),
without any traffic. :func:`probe_endpoint` makes one cheap request (``GET <api_base>/models``) to an HTTP
endpoint, so a missing server or a refused key stops a run once, before the first episode, instead of failing
every episode the same way. A hosted provider named without an api_base (``openai/gpt-4.1``,
``anthropic/...``) is first checked for its key in the environment; OpenAI's own API (or the base URL in
``OPENAI_BASE_URL``) is then probed like any endpoint. In-process models are checked by importing what they need.
"""

from __future__ import annotations

import asyncio
import logging
import os

import aiohttp

from harness.llm.aliases import AliasTable, ResolvedModel, env_name
from harness.llm.errors import EndpointUnreachable, MissingCredentials, RequestRejected
from harness.llm.litellm_setup import litellm_module
from harness.llm.local_provider import LOCAL_PROVIDER
from harness.llm.openai_http import DIRECT_PROVIDERS, direct_route_enabled
from harness.llm.python_models import PYTHON_PROVIDER, registered_python_models
from harness.llm.transport import OPENAI_COMPATIBLE, api_key_for
from harness.redact import redact

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 30.0


def route_problem(model: str, resolved: ResolvedModel, aliases: AliasTable) -> str | None:
    """Why ``model`` cannot be routed (one line naming what would work), or None when it can."""
    if resolved.provider == PYTHON_PROVIDER:
        name = resolved.provider_model.split("/", 1)[1]
        if name not in registered_python_models():
            return f"no python model is registered as {name!r} (harness.llm.register_python_model)"
        return None
    if resolved.provider == LOCAL_PROVIDER:
        return None
    if resolved.provider in DIRECT_PROVIDERS and resolved.api_base and direct_route_enabled():
        return None  # posted by harness.llm.openai_http, not routed by litellm (asking it would cost its import)
    try:
        litellm_module().get_llm_provider(resolved.provider_model, api_base=resolved.api_base)
    except Exception:  # litellm raises BadRequestError (and others) for a string it cannot route
        known = ", ".join(aliases.names)
        return (
            f"model {model!r} is neither a model alias ({known}) nor a litellm model string "
            f"(provider/model, e.g. openai/gpt-4o-mini or hosted_vllm/<name> with an api_base)"
        )
    return None


def _local_backend_problem() -> str | None:
    from harness.llm.local import LocalModelUnavailable, import_backend

    try:
        import_backend()
    except LocalModelUnavailable as exc:
        return str(exc)
    return None


async def probe_endpoint(
    model: str,
    resolved: ResolvedModel,
    session: aiohttp.ClientSession,
    *,
    timeout: float = PROBE_TIMEOUT_S,
) -> None:
    """One cheap request to where ``model`` is served. Raises :class:`EndpointUnreachable` when nothing answers
    in ``timeout`` seconds, :class:`RequestRejected` when the key is refused; anything else the endpoint says
    is logged and left for the run's own retries."""
    if resolved.provider == LOCAL_PROVIDER:
        problem = await asyncio.to_thread(_local_backend_problem)
        if problem is not None:
            raise EndpointUnreachable(problem, model=model, endpoint=LOCAL_PROVIDER)
        return
    if resolved.provider == PYTHON_PROVIDER:
        return
    endpoint = resolved.api_base
    if endpoint is None:
        _check_credentials(model, resolved)
        endpoint = provider_default_base(resolved)
    if endpoint is None or resolved.provider not in OPENAI_COMPATIBLE:
        logger.debug("no reachability probe for %s: its provider has no OpenAI-style /models to ask", model)
        return
    headers = {}
    api_key = api_key_for(resolved.provider, resolved.api_key_env, resolved.api_base)
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    url = endpoint.rstrip("/") + "/models"
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            status = response.status
            body = (await response.read())[:300].decode(errors="replace")
    except TimeoutError:
        raise EndpointUnreachable(
            f"model endpoint {endpoint} for {model!r} timed out after {timeout:g} s (GET {url})",
            model=model,
            endpoint=endpoint,
        ) from None
    except aiohttp.ClientError as exc:
        raise EndpointUnreachable(
            _unreachable(model, resolved, endpoint, redact(str(exc)) or type(exc).__name__),
            model=model,
            endpoint=endpoint,
        ) from None
    if status in (401, 403):
        raise RequestRejected(
            f"model endpoint {endpoint} for {model!r} refused the key ({status})"
            + (f"; set {resolved.api_key_env}" if resolved.api_key_env else ""),
            status_code=status,
            model=model,
            endpoint=endpoint,
        )
    if status >= 400:
        logger.info(
            "%s answered GET /models with %d (%s); going ahead", endpoint, status, redact(" ".join(body.split()))
        )


def _check_credentials(model: str, resolved: ResolvedModel) -> None:
    """A hosted provider (no api_base of ours) needs its key in the environment; say which, before any request."""
    if resolved.api_key_env:
        if not os.environ.get(resolved.api_key_env):
            raise MissingCredentials(
                f"model {model!r} needs the key in {resolved.api_key_env}, which is not set", model=model
            )
        return
    try:
        report = litellm_module().validate_environment(model=resolved.provider_model)
    except Exception as exc:  # litellm raises for providers it cannot introspect; the first request will tell
        logger.debug("could not check the credentials of %s: %s", model, exc)
        return
    missing = [str(name) for name in report.get("missing_keys") or []]
    if not report.get("keys_in_environment", True) and missing:
        raise MissingCredentials(
            f"model {model!r} ({resolved.provider}) needs {' and '.join(missing)} in the environment, which is not set",
            model=model,
        )


def provider_default_base(resolved: ResolvedModel) -> str | None:
    """Where a provider string without an api_base of ours is sent: the base URL variable the OpenAI client
    honours, else the one litellm knows for the provider."""
    if resolved.provider == "openai":
        return os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE") or "https://api.openai.com/v1"
    try:
        api_base: str | None = litellm_module().get_llm_provider(resolved.provider_model)[3]
        return api_base
    except Exception:  # a string litellm cannot route was refused by route_problem already
        return None


def _unreachable(model: str, resolved: ResolvedModel, endpoint: str, detail: str) -> str:
    text = f"model endpoint {endpoint} for {model!r} is unreachable ({detail})"
    if resolved.serve_hint:
        text += f"; start it with: {resolved.serve_hint}"
    if resolved.alias:
        text += f"; or point the alias elsewhere: HARNESS_MODEL_{env_name(resolved.alias)}_API_BASE=<url>"
    return text


__all__ = ["PROBE_TIMEOUT_S", "probe_endpoint", "route_problem"]
