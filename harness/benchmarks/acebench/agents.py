"""ACEBench's own agent setting: the model gets upstream's text prompt and writes its calls as text.

Each turn is one request, as upstream's agent makes it (``model_inference/{multi_turn,multi_step}/
APIModel_agent.py``): the system prompt the rules wrote (upstream's instructions, then the domain prompt), and one
user message, upstream's template with the scenario's function docs (Python's ``str()`` of the list) and the
conversation so far as upstream's history text: ``user:``, ``agent:`` and ``execution:`` lines in multi_turn; in
multi_step the ``user:`` line and the ``execution result:`` lines only, because upstream's multi_step scene never
adds the agent's own messages to the history it shows.

The reply is read as upstream reads it (:mod:`harness.benchmarks.acebench.calls`):

- a text holding ``finish conversation`` is a text reply (the rules end the episode on it), never executed;
- multi_turn: a text without ``[...]`` on one line, or whose calls do not read, goes to the user as a text reply;
- multi_step: every other text goes to execution; one that does not read is answered with upstream's
  ``NOT_CALLS_REPLY`` and the episode goes on (an unreadable turn, recorded in the trajectory's errors);
- calls that read are the turn's tool calls; a text that reads as an expression without calls (``[1]``) executes
  nothing and is answered with an empty execution result, ``[]``.

A message sent to execution keeps the text as written in ``call_text``: it is upstream's milestone for the process
accuracy (:mod:`harness.benchmarks.acebench.evaluation`) and the ``agent:`` line of the history. Messages of the
execution role that are not tool results are ``user`` messages named ``execution``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.text_calls import TextCallAgent
from harness.benchmarks.acebench.calls import EXECUTION, NOT_CALLS_REPLY, has_call_brackets, parse_calls
from harness.benchmarks.acebench.evaluation import CALL_TEXT_KEY
from harness.benchmarks.acebench.rules import ACEBENCH_STOP
from harness.benchmarks.acebench.source import CATEGORIES
from harness.rules.protocols import AgentTurn, openai_tool_call
from harness.schema import ModelSettings, Scenario

if TYPE_CHECKING:
    from harness.llm import LLMClient


def _result_element(content: Any) -> str:
    """One tool message's text inside upstream's execution list (the dispatcher writes ``str([x])`` per call)."""
    if isinstance(content, str) and content.startswith("[") and content.endswith("]"):
        return content[1:-1]
    return repr(content)


def render_history(messages: list[dict[str, Any]], multi_turn: bool) -> str:
    """The transcript after the system prompt as upstream's history text (``Scene.get_inference_message``)."""
    execution = "execution:" if multi_turn else "execution result:"
    lines: list[str] = []
    results: list[str] = []

    def flush() -> None:
        if results:
            lines.append(execution + "[" + ", ".join(results) + "]")
            results.clear()

    for message in messages:
        role = message.get("role")
        if role == "tool":
            results.append(_result_element(message.get("content")))
            continue
        flush()
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        if role == "user" and message.get("name") == EXECUTION:
            lines.append(execution + text)
        elif role == "user":
            lines.append("user:" + text)
        elif role == "assistant" and multi_turn:
            written = message.get(CALL_TEXT_KEY)
            lines.append("agent:" + (written if isinstance(written, str) else text))
    flush()
    return "".join(line + "\n" for line in lines)


class AceBenchTextAgent(TextCallAgent):
    """ACEBench's agent writing calls as text, for the scenarios of ``harness import acebench`` (build one per
    scenario: its category, function docs and prompt template come from the scenario)."""

    kind = "acebench-text"

    def __init__(
        self,
        settings: ModelSettings,
        client: LLMClient,
        scenario: Scenario,
        *,
        role: str = "agent",
        system_prompt_version: str = "1",
    ) -> None:
        super().__init__(settings, client, role=role, system_prompt_version=system_prompt_version)
        details = scenario.provenance.details
        prompts = details.get("text_prompts")
        template = prompts.get("user") if isinstance(prompts, dict) else None
        functions = details.get("functions")
        category = details.get("category")
        if not isinstance(template, str) or not isinstance(functions, list) or category not in CATEGORIES:
            raise ValueError(
                f"scenario {scenario.id} was not imported by this version of `harness import acebench` (it has no "
                "ACEBench text prompts): import it again"
            )
        try:
            template.format(functions="", history="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"scenario {scenario.id}: ACEBench's request template does not format: {exc}") from None
        self.template = template
        self.functions = str(functions)
        self.multi_turn = category == "multi_turn"

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        system = messages[0].get("content") if messages and messages[0].get("role") == "system" else ""
        rest = messages[1:] if messages and messages[0].get("role") == "system" else messages
        history = render_history(rest, self.multi_turn)
        request = self.template.format(functions=self.functions, history=history)
        return [{"role": "system", "content": system or ""}, {"role": "user", "content": request}]

    def read(self, text: str) -> AgentTurn:
        reply = AgentTurn(message={"role": "assistant", "content": text})
        if ACEBENCH_STOP in text or (self.multi_turn and not has_call_brackets(text)):
            return reply
        parsed = parse_calls(text, skip_non_calls=self.multi_turn)
        if parsed.error is not None:
            if self.multi_turn:
                return reply
            return AgentTurn(
                message={"role": "assistant", "content": text, CALL_TEXT_KEY: text},
                parse_error=f"not calls: {parsed.error}",
                feedback={"role": "user", "name": EXECUTION, "content": NOT_CALLS_REPLY},
            )
        if not parsed.calls:
            return AgentTurn(
                message={"role": "assistant", "content": text, CALL_TEXT_KEY: text},
                parse_error="no calls to execute",
                feedback={"role": "user", "name": EXECUTION, "content": "[]"},
            )
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [openai_tool_call(call) for call in parsed.calls],
            CALL_TEXT_KEY: text,
        }
        return AgentTurn(message=message, tool_calls=parsed.calls)
