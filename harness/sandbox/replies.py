"""The harness's reading of what a jailed process answers: sizes, shapes and texts, checked before use.

A jailed process can rewrite the worker that frames its replies, so nothing it sends is trusted. Each request has
a reply size limit that the channel enforces while it reads (``Child.request``): a longer frame is not read, its
process is killed and the request fails. A reply that arrives whole is then read here: its result or state must
be plain JSON within :class:`~harness.jsonlimits.JSONLimits` derived from ``SandboxLimits``, its shape must be
what the request asked for, and every error text in it is cut to a fixed length. A reply that fails is an error
observation, a failed state read or a failed check result with the reason, never an exception that ends the run.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from harness.jsonlimits import ERROR_TEXT_LIMIT, JSONLimits, UnsafeJSON, check_decoded_json, cut_text
from harness.sandbox.limits import SandboxLimits
from harness.schema import CheckResult, DiffEntry, Observation, ObservationKind, ToolCall

REPLY_ENVELOPE_BYTES = 64 * 1024
"""Room in a reply for what surrounds its result or state: the status, the kind, an error text."""
CHECK_ANSWER_BYTES = 16 * 1024
"""Room in a checks reply for each check's answer (a short repr of the value and an error text)."""

OBSERVATION_KINDS = {kind.value: kind for kind in ObservationKind}
"""Observation kinds by the name a child or the channel reports."""
_NOT_THE_ENVIRONMENTS = frozenset({ObservationKind.OK, ObservationKind.SANDBOX_ERROR})
"""Kinds a failed call's reply cannot name: the process that replies has run the environment's code."""


class ReplyRefused(ValueError):
    """A reply that is not what the request asked for, or not within the limits; the message says why."""


class ReplyLimits:
    """The limits one pool applies to every reply, computed once from its ``SandboxLimits``."""

    def __init__(self, limits: SandboxLimits):
        self.max_result_bytes = limits.max_result_bytes
        self.max_state_bytes = limits.max_state_bytes
        self.result = JSONLimits(limits.max_result_depth, limits.max_result_items, limits.max_string_chars)
        self.state = JSONLimits(limits.max_state_depth, limits.max_state_items, limits.max_string_chars)
        # A diff is a list of entries whose ``before`` and ``after`` are parts of the state (two levels more).
        self.diff = JSONLimits(limits.max_state_depth + 2, 2 * limits.max_state_items, limits.max_string_chars)
        # A decoded reply within both bounds below is within the result limits (the strictest) without a walk:
        # orjson only decodes string keys, finite floats and 64-bit integers; a reply of N bytes holds fewer than
        # N items and no string longer than N; it cannot nest deeper than the brackets it holds.
        self.small_reply_bytes = min(limits.max_result_items, limits.max_string_chars)

    def call_reply_bytes(self, record_diffs: bool) -> int:
        """The longest reply to a tool call: the result, and with diffs both sides of every changed attribute."""
        diffs = 2 * self.max_state_bytes if record_diffs else 0
        return self.max_result_bytes + diffs + REPLY_ENVELOPE_BYTES

    def state_reply_bytes(self) -> int:
        return self.max_state_bytes + REPLY_ENVELOPE_BYTES

    def checks_reply_bytes(self, count: int) -> int:
        return count * CHECK_ANSWER_BYTES + REPLY_ENVELOPE_BYTES


def open_reply_bytes(code_size: int) -> int:
    """The longest reply to opening a session: its status and the compiled class (see ``_remember_bytecode``)."""
    return 8 * code_size + 100_000 + REPLY_ENVELOPE_BYTES


def error_text(value: object) -> str:
    """An error text from a jailed process, cut to ``ERROR_TEXT_LIMIT`` characters."""
    return cut_text(value if isinstance(value, str) else str(value), ERROR_TEXT_LIMIT)


def read_call_reply(
    call: ToolCall,
    response: dict[str, Any],
    reply_bytes: int,
    reply_brackets: int,
    string_bound: int,
    limits: ReplyLimits,
) -> tuple[Observation, list[DiffEntry]]:
    """The observation and state diff of one tool call's reply (``reply_bytes`` long, with ``reply_brackets``
    opening brackets and no string longer than ``string_bound``); a reply out of bounds is a ``bad_result``."""
    plain = reply_bytes <= limits.small_reply_bytes and reply_brackets <= limits.result.max_depth
    try:
        diff = _read_diff(response.get("diff"), limits, plain, string_bound)
    except ReplyRefused as exc:
        return _refused(call, f"its state change {exc}")
    if response.get("ok") is not True:
        kind = OBSERVATION_KINDS.get(str(response.get("kind")), ObservationKind.TOOL_EXCEPTION)
        if kind in _NOT_THE_ENVIRONMENTS:
            # A call goes to a process the environment's code has run in (its open did), and that code can write
            # any reply: a failure it reports is its own, whatever kind the reply names.
            kind = ObservationKind.TOOL_EXCEPTION
        error = error_text(response.get("error") or "the tool failed without saying why")
        return Observation(tool_call_id=call.id, name=call.name, kind=kind, error=error), diff
    result = response.get("result")
    if reply_bytes > limits.max_result_bytes:  # the diff may account for the size; measure the result alone
        size = len(orjson.dumps(result))
        if size > limits.max_result_bytes:
            return _refused(call, f"the result has {size:,} bytes; the limit is {limits.max_result_bytes:,}")
    try:
        if not plain:
            check_decoded_json(result, limits.result, string_bound)
    except UnsafeJSON as exc:
        return _refused(call, f"the result {exc}")
    if isinstance(result, dict) and result.get("success") is False:
        error = error_text(result.get("error") or result.get("message") or "the tool reported failure")
        observation = Observation(
            tool_call_id=call.id, name=call.name, kind=ObservationKind.TOOL_ERROR, content=result, error=error
        )
        return observation, diff
    return Observation(tool_call_id=call.id, name=call.name, content=result), diff


def _refused(call: ToolCall, reason: str) -> tuple[Observation, list[DiffEntry]]:
    error = f"the tool's reply was refused: {reason}"
    return Observation(tool_call_id=call.id, name=call.name, kind=ObservationKind.BAD_RESULT, error=error), []


def _read_diff(diff: object, limits: ReplyLimits, plain: bool, string_bound: int) -> list[DiffEntry]:
    if diff is None:
        return []
    if not isinstance(diff, list):
        raise ReplyRefused("is not a list")
    try:
        if not plain:
            check_decoded_json(diff, limits.diff, string_bound)
        return [DiffEntry.model_validate(entry) for entry in diff]
    except UnsafeJSON as exc:
        raise ReplyRefused(str(exc)) from None
    except ValidationError as exc:
        raise ReplyRefused(f"is not a list of diff entries ({exc.error_count()} problems)") from None


def read_state_reply(response: dict[str, Any], string_bound: int, limits: ReplyLimits) -> dict[str, Any]:
    """The state a state reply holds (``string_bound``: a bound on its strings' characters, see
    ``Child.reply_string_bound``); :class:`ReplyRefused` with the reason when it holds none or one out of bounds."""
    state = response.get("state")
    if response.get("ok") is not True or not isinstance(state, dict):
        raise ReplyRefused(error_text(response.get("error") or "the reply holds no state"))
    try:
        check_decoded_json(state, limits.state, string_bound)
    except UnsafeJSON as exc:
        raise ReplyRefused(f"the state {exc}") from None
    return state


class KnownStates:
    """The last few states sessions of a pool started from, by the exact bytes of their reply.

    A state reply whose bytes equal one of these is not decoded or checked again: it is that state, and its
    readers share one object, which none of them may change (``EnvSession.state(shared=True)``). Sessions of one
    scenario start from the same state, and so do most scenarios of a benchmark domain; reading a large one
    (retail tasks: 1.2 MB) costs a decode and a walk of its containers each time otherwise. Only starting states
    (read before a session's first call) are remembered: a state after calls rarely repeats, and would push the
    starting states out. Equal bytes are equal states whatever process sent them, so nothing is taken on trust.
    """

    def __init__(self, capacity: int = 4):
        self.capacity = capacity
        self._states: list[tuple[bytes, dict[str, Any]]] = []
        """Most recent last. Compared, not hashed: a reply is a new object each time, and hashing it would read all
        of it, where a comparison stops at its length or its first difference."""

    def get(self, body: bytes) -> dict[str, Any] | None:
        for index, (known, state) in enumerate(self._states):
            if len(known) == len(body) and known == body:
                self._states.append(self._states.pop(index))
                return state
        return None

    def remember(self, body: bytes, state: dict[str, Any]) -> None:
        self._states = [entry for entry in self._states if entry[0] != body]
        self._states.append((body, state))
        if len(self._states) > self.capacity:
            del self._states[: len(self._states) - self.capacity]


def read_check_answers(response: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """The ``count`` answers of a checks reply; :class:`ReplyRefused` when the reply does not hold them."""
    answers = response.get("results")
    if response.get("ok") is not True or not isinstance(answers, list) or len(answers) != count:
        raise ReplyRefused(f"running checks failed: {error_text(response.get('error') or 'a malformed answer')}")
    return [
        answer if isinstance(answer, dict) else {"passed": False, "error": "a malformed answer"} for answer in answers
    ]


def read_batch_answers(response: dict[str, Any], episodes: int, count: int) -> list[list[dict[str, Any]]]:
    """The answers of a batch reply, ``count`` for each of its ``episodes`` (all in ``results``, episode after
    episode); :class:`ReplyRefused` when the reply does not hold them."""
    answers = read_check_answers(response, episodes * count)
    return [answers[start : start + count] for start in range(0, len(answers), count)]


def check_result(check_id: str, answer: dict[str, Any]) -> CheckResult:
    """One check's result from its answer: only an exact True passes; texts are cut, anything else dropped."""
    value, error = answer.get("value"), answer.get("error")
    return CheckResult(
        check_id=check_id,
        passed=answer.get("passed") is True,
        value=error_text(value) if isinstance(value, str) else None,
        error=error_text(error) if isinstance(error, str) else None,
    )
