"""``LLMClient``: the one door to models.

``await client.chat(settings, messages, tools=..., role="agent")`` resolves the model string (aliases, see
:mod:`harness.llm.aliases`), answers from the opt-in response cache when it can, otherwise waits for the
endpoint's admission (concurrency cap, rpm, tpm), calls litellm, retries what is transient, and returns the
assistant message with token usage and cost. Usage is summed per role.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type

from harness.llm.aliases import AliasTable, ResolvedModel, deep_merge
from harness.llm.cache import ResponseCache, cache_key
from harness.llm.errors import EndpointUnreachable, LLMError, RetriesExhausted
from harness.llm.limits import EndpointGate, EndpointLimits
from harness.llm.litellm_setup import litellm_module
from harness.llm.local_provider import LOCAL_PROVIDER
from harness.llm.openai_http import DIRECT_PROVIDERS, direct_route_enabled, post_chat_completion
from harness.llm.retry import RetryPolicy, RetryWait, TransientFailure, classify, exception_chain
from harness.llm.transport import OPENAI_COMPATIBLE, OpenAIClientPool, api_key_for
from harness.redact import redact, register_secret, register_secret_variable
from harness.schema import ModelSettings, Usage

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 120.0
"""Seconds one request may take: long enough for a long completion on a busy server, short enough that a hung
request costs minutes, not an hour, across the retry schedule."""

# ModelSettings.extra keys that steer routing rather than go into the request.
ROUTING_KEYS = ("api_base", "api_key_env")

UNPRICED_PROVIDERS = frozenset({"hosted_vllm"})
"""Providers litellm's cost map never prices: it has no entry of theirs, and its lookup only takes an entry of
the model's own provider. Their models are unpriced unless their alias sets a price, known without importing
litellm (two seconds of a run's start, when the model is otherwise reached without it)."""
FREE_PROVIDERS = frozenset({LOCAL_PROVIDER})
"""Providers whose models cost nothing unless their alias sets a price: the embedded model runs in this process."""


class ChatResult(BaseModel):
    """One assistant turn. ``message`` is an OpenAI assistant message dict."""

    message: dict[str, Any]
    usage: Usage
    cached: bool = False
    finish_reason: str | None = None
    model: str = Field(description="The provider model string that answered.")
    attempts: int = Field(default=1, description="Requests made (0 for a cache hit).")


def _message_dict(message: Any) -> dict[str, Any]:
    """The assistant message of a litellm response as a plain OpenAI-shaped dict."""
    result: dict[str, Any] = {"role": "assistant", "content": getattr(message, "content", None)}
    tool_calls = getattr(message, "tool_calls", None)
    if tool_calls:
        result["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments or ""},
            }
            for call in tool_calls
        ]
    reasoning = getattr(message, "reasoning_content", None)
    if reasoning:
        result["reasoning_content"] = reasoning
    return result


def _unreachable_message(model: str, resolved: ResolvedModel, endpoint: str, detail: str) -> str:
    lines = [f"Model endpoint {endpoint} for {model!r} is unreachable ({detail})."]
    if resolved.serve_hint:
        lines.append(f"Start one with: {resolved.serve_hint}")
    elif resolved.provider == "hosted_vllm":
        served = resolved.provider_model.split("/", 1)[1]
        lines.append(
            f"Start a vLLM server with: vllm serve <model> --served-model-name {served} "
            f"--enable-auto-tool-choice --tool-call-parser hermes"
        )
    if resolved.alias:
        from harness.llm.aliases import env_name

        lines.append(f"Or point the alias elsewhere: HARNESS_MODEL_{env_name(resolved.alias)}_API_BASE=<url>")
    return "\n".join(lines)


class LLMClient:
    """Async access to every model, with limits, retries, cache and usage accounting.

    ``endpoint_limits`` maps an endpoint (an api_base, a provider such as ``openai``, or an alias, which
    stands for its endpoint) to its limits; other endpoints get ``default_limits``. ``timeout`` is per
    request in seconds. ``max_connections`` sizes the HTTP connection pool shared by all OpenAI-compatible
    endpoints. Use one client per event loop and ``await client.aclose()`` at the end.
    """

    def __init__(
        self,
        cache_dir: str | Path | None = None,
        default_limits: EndpointLimits | None = None,
        *,
        endpoint_limits: Mapping[str, EndpointLimits] | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_connections: int = 1024,
        aliases: AliasTable | None = None,
    ) -> None:
        self.aliases = aliases or AliasTable.load()
        for entry in self.aliases.entries.values():
            register_secret_variable(entry.api_key_env)
        self.default_limits = default_limits or EndpointLimits()
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self.cache = ResponseCache(cache_dir) if cache_dir is not None else None
        self._limits: dict[str, EndpointLimits] = {}
        for endpoint, limits in (endpoint_limits or {}).items():
            self.set_limits(endpoint, limits)
        self._resolved: dict[str, ResolvedModel] = {}
        self._gates: dict[str, EndpointGate] = {}
        self._answered: set[str] = set()
        self._pool = OpenAIClientPool(max_connections=max_connections)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._usage: dict[str, Usage] = {}
        self._prices: dict[str, tuple[float, float] | None] = {}

    # ------------------------------------------------------------------------------------------- config

    def resolve(self, model: str) -> ResolvedModel:
        resolved = self._resolved.get(model)
        if resolved is None:
            resolved = self._resolved[model] = self.aliases.resolve(model)
        return resolved

    def route_problem(self, model: str) -> str | None:
        """Why ``model`` cannot be routed to any model (one line), or None. Makes no request."""
        from harness.llm.probe import route_problem

        return route_problem(model, self.resolve(model), self.aliases)

    async def probe(self, model: str) -> None:
        """One cheap request to ``model``'s endpoint; raises :class:`EndpointUnreachable` or
        :class:`RequestRejected` when a run there could not succeed (see :mod:`harness.llm.probe`)."""
        from harness.llm.probe import PROBE_TIMEOUT_S, probe_endpoint

        self._bind_loop()
        await probe_endpoint(
            model, self.resolve(model), self._pool.session(), timeout=min(self.timeout, PROBE_TIMEOUT_S)
        )

    def set_limits(self, endpoint: str, limits: EndpointLimits) -> None:
        """Set the limits of an endpoint (an api_base or provider), or of the endpoint an alias points to."""
        key = self.resolve(endpoint).endpoint if endpoint in self.aliases.entries else endpoint
        self._limits[key] = limits
        self._gates.pop(key, None)

    def limits_for(self, endpoint: str) -> EndpointLimits:
        return self._limits.get(endpoint, self.default_limits)

    # -------------------------------------------------------------------------------------------- usage

    def usage_by_role(self) -> dict[str, Usage]:
        return {role: usage.model_copy() for role, usage in self._usage.items()}

    def total_usage(self) -> Usage:
        total = Usage()
        for usage in self._usage.values():
            total.add(usage)
        return total

    def _account(self, role: str, usage: Usage) -> None:
        current = self._usage.get(role)
        if current is None:
            self._usage[role] = usage.model_copy()
        else:
            current.add(usage)

    # ------------------------------------------------------------------------------------------ chatting

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None:
                # Gates and connections belong to the previous loop and cannot be used from this one.
                self._gates.clear()
                self._pool.forget()
            self._loop = loop

    def _gate(self, endpoint: str) -> EndpointGate:
        gate = self._gates.get(endpoint)
        if gate is None:
            gate = self._gates[endpoint] = EndpointGate(self.limits_for(endpoint))
        return gate

    async def chat(
        self,
        settings: ModelSettings,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        role: str = "agent",
    ) -> ChatResult:
        """One chat completion. Raises :class:`LLMError` subclasses only."""
        self._bind_loop()
        started = time.perf_counter()
        resolved = self.resolve(settings.model)
        extra = dict(settings.extra)
        if "api_key" in extra:
            raise ValueError("put API keys in environment variables and name them with extra['api_key_env']")
        api_base = extra.pop("api_base", None) or resolved.api_base
        api_key_env = extra.pop("api_key_env", None) or resolved.api_key_env
        register_secret_variable(api_key_env)
        params = self._parameters(resolved, settings, extra)
        endpoint = api_base or resolved.endpoint
        tools = tools or None
        if tools is None:
            # A tool_choice (a benchmark runner's default sends "auto" with its tools) means nothing without tools,
            # and endpoints refuse it.
            params.pop("tool_choice", None)

        key = None
        if self.cache is not None:
            key = cache_key(
                provider_model=resolved.provider_model,
                api_base=api_base,
                messages=messages,
                tools=tools,
                params=params,
            )
            entry = await self.cache.get(key)
            if entry is not None:
                return self._cached_result(entry, resolved, role)

        request: dict[str, Any] = {
            **params,
            "model": resolved.provider_model,
            "messages": messages,
            "timeout": params.get("timeout", self.timeout),
            # Retries are ours alone: litellm's and the OpenAI SDK's would multiply the attempts.
            "max_retries": 0,
            "num_retries": 0,
        }
        if tools is not None:
            request["tools"] = tools
        if api_base is not None:
            request["api_base"] = api_base
        direct: tuple[str, str | None] | None = None
        if resolved.provider in OPENAI_COMPATIBLE:
            api_key = api_key_for(resolved.provider, api_key_env, api_base)
            register_secret(api_key)
            if api_base is not None and resolved.provider in DIRECT_PROVIDERS and direct_route_enabled():
                direct = (api_base, api_key)
            elif api_key is not None:
                request["api_key"] = api_key
                if api_base is not None:
                    request["client"] = self._pool.client_for(api_base, api_key)

        response, attempts = await self._call_with_retries(request, settings.model, resolved, endpoint, params, direct)
        result = self._result(response, resolved, attempts, time.perf_counter() - started)
        self._account(role, result.usage)
        if self.cache is not None and key is not None:
            await self.cache.put(
                key,
                {
                    "message": result.message,
                    "finish_reason": result.finish_reason,
                    "model": result.model,
                    "prompt_tokens": result.usage.prompt_tokens,
                    "completion_tokens": result.usage.completion_tokens,
                },
            )
        return result

    def _parameters(self, resolved: ResolvedModel, settings: ModelSettings, extra: dict[str, Any]) -> dict[str, Any]:
        params = copy.deepcopy(resolved.params) if resolved.params else {}
        for name in ("temperature", "top_p", "max_tokens", "seed"):
            value = getattr(settings, name)
            if value is not None:
                params[name] = value
        return deep_merge(params, extra) if extra else params

    async def _call_with_retries(
        self,
        request: dict[str, Any],
        model: str,
        resolved: ResolvedModel,
        endpoint: str,
        params: dict[str, Any],
        direct: tuple[str, str | None] | None = None,
    ) -> tuple[Any, int]:
        gate = self._gate(endpoint)
        policy = self.retry
        estimate = 0
        if gate.limits.tpm:
            estimate = len(orjson.dumps(request["messages"], default=str)) // 4 + int(params.get("max_tokens") or 0)

        timeouts = 0

        def should_stop(state: RetryCallState) -> bool:
            nonlocal timeouts
            if state.attempt_number >= policy.max_attempts:
                return True
            outcome = state.outcome
            failure = outcome.exception() if outcome is not None else None
            if isinstance(failure, TransientFailure) and failure.timed_out:
                timeouts += 1
                if timeouts >= policy.timeout_attempts:
                    return True
            return (
                isinstance(failure, TransientFailure)
                and failure.unreachable
                and endpoint not in self._answered
                and state.attempt_number >= policy.unreachable_attempts
            )

        def log_retry(state: RetryCallState) -> None:
            outcome = state.outcome
            failure = outcome.exception() if outcome is not None else None
            wait = state.next_action.sleep if state.next_action is not None else 0.0
            logger.warning(
                "%s at %s: %s; retry %d in %.1fs", model, endpoint, redact(str(failure)), state.attempt_number, wait
            )

        attempts = 1
        first_failure: TransientFailure | None = None
        try:
            try:
                # Most requests succeed at once: the retry machinery is only built when the first attempt fails.
                return await self._attempt(gate, estimate, request, model, endpoint, direct), attempts
            except TransientFailure as failure:
                first_failure = failure
            retrying = AsyncRetrying(
                stop=should_stop,
                wait=RetryWait(policy),
                retry=retry_if_exception_type(TransientFailure),
                before_sleep=log_retry,
                reraise=True,
            )
            async for attempt in retrying:
                with attempt:
                    if first_failure is not None:
                        # The schedule's first attempt is the one already made: its failure is its outcome.
                        made, first_failure = first_failure, None
                        raise made
                    attempts += 1
                    return await self._attempt(gate, estimate, request, model, endpoint, direct), attempts
        except TransientFailure as failure:
            detail = redact(failure.detail)
            if failure.unreachable:
                refused = any(marker in detail.lower() for marker in ("refused", "connect call failed"))
                raise EndpointUnreachable(
                    _unreachable_message(model, resolved, endpoint, "connection refused" if refused else detail),
                    model=model,
                    endpoint=endpoint,
                ) from None
            raise RetriesExhausted(
                f"{model} at {endpoint}: {failure.reason} ({attempts} attempts): {detail}",
                attempts=attempts,
                model=model,
                endpoint=endpoint,
            ) from failure
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _attempt(
        self,
        gate: EndpointGate,
        estimate: int,
        request: dict[str, Any],
        model: str,
        endpoint: str,
        direct: tuple[str, str | None] | None,
    ) -> Any:
        """One request once admitted; what failed is raised as a :class:`TransientFailure` or an :class:`LLMError`."""
        async with gate.admit(estimate) as admission:
            try:
                if direct is not None:
                    response = await post_chat_completion(
                        self._pool.session(),
                        request,
                        api_base=direct[0],
                        api_key=direct[1],
                        model=model,
                        endpoint=endpoint,
                    )
                else:
                    response = await litellm_module().acompletion(**request)
            except Exception as exc:
                failure = classify(exc, model=model, endpoint=endpoint, timeout=request.get("timeout"))
                if isinstance(failure, LLMError):
                    failure.args = (redact(str(failure)),)
                    if any(link is failure for link in exception_chain(exc)):
                        # Raised by an in-process provider: keep its own cause, avoid a cycle.
                        raise failure from failure.__cause__
                raise failure from exc
            usage = getattr(response, "usage", None)
            if usage is not None:
                admission.settle(int(usage.prompt_tokens or 0) + int(usage.completion_tokens or 0))
        self._answered.add(endpoint)
        return response

    def price_of(self, resolved: ResolvedModel) -> tuple[float, float] | None:
        """USD per (prompt, completion) token: the alias's own price, else litellm's cost map; None: unpriced."""
        if resolved.usd_per_million_tokens is not None:
            prompt, completion = resolved.usd_per_million_tokens
            return prompt / 1e6, completion / 1e6
        if resolved.provider in FREE_PROVIDERS:
            return 0.0, 0.0
        if resolved.provider_model not in self._prices and resolved.provider in UNPRICED_PROVIDERS:
            self._prices[resolved.provider_model] = None
        if resolved.provider_model not in self._prices:
            try:
                info = litellm_module().get_model_info(resolved.provider_model)
                prompt_price, completion_price = info.get("input_cost_per_token"), info.get("output_cost_per_token")
                known = prompt_price is not None and completion_price is not None
                self._prices[resolved.provider_model] = (
                    (float(prompt_price), float(completion_price)) if known else None
                )
            except Exception:  # litellm raises for models it has no price for
                self._prices[resolved.provider_model] = None
        return self._prices[resolved.provider_model]

    def _cost(self, resolved: ResolvedModel, response: Any, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The request's cost in USD; None when the model has no known price."""
        prices = self.price_of(resolved)
        if prices is None:
            hidden = getattr(response, "_hidden_params", None) or {}
            reported = hidden.get("response_cost")
            return float(reported) if isinstance(reported, int | float) and reported > 0 else None
        if resolved.usd_per_million_tokens is None:
            hidden = getattr(response, "_hidden_params", None) or {}
            reported = hidden.get("response_cost")
            if isinstance(reported, int | float) and reported >= 0:
                return float(reported)
        return prompt_tokens * prices[0] + completion_tokens * prices[1]

    def _result(self, response: Any, resolved: ResolvedModel, attempts: int, seconds: float) -> ChatResult:
        choices = getattr(response, "choices", None)
        if not choices:
            raise LLMError(f"{resolved.provider_model}: the response has no choices", model=resolved.provider_model)
        choice = choices[0]
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = self._cost(resolved, response, prompt_tokens, completion_tokens)
        return ChatResult(
            message=_message_dict(choice.message),
            usage=Usage(
                requests=1,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cost_usd=cost or 0.0,
                unpriced_requests=int(cost is None),
                model_seconds=seconds,
            ),
            finish_reason=getattr(choice, "finish_reason", None),
            model=resolved.provider_model,
            attempts=attempts,
        )

    def _cached_result(self, entry: dict[str, Any], resolved: ResolvedModel, role: str) -> ChatResult:
        # A hit costs nothing and takes no model time; its tokens are those of the original answer.
        usage = Usage(
            requests=1,
            cached_requests=1,
            prompt_tokens=int(entry.get("prompt_tokens", 0)),
            completion_tokens=int(entry.get("completion_tokens", 0)),
        )
        self._account(role, usage)
        return ChatResult(
            message=entry["message"],
            usage=usage,
            cached=True,
            finish_reason=entry.get("finish_reason"),
            model=str(entry.get("model", resolved.provider_model)),
            attempts=0,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
        self._gates.clear()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
