"""ACEBench's own text setting (`--agent acebench-text --rules acebench-text`): the reader of calls written as text
(nested values, strings holding commas and brackets, several calls, text that does not read: a recorded failure,
never a crash, never evaluated); then, through the real CLI, the real jail and a scripted OpenAI-compatible server
on 127.0.0.1, models that write their calls as text on libraries imported from the made-up checkout: upstream's
prompt and history reach the model, a right run scores 1.0 and a wrong argument 0, text that is no call gets
upstream's answer, and `harness export acebench` writes the text the model wrote as the process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.benchmarks.acebench.calls import NOT_CALLS_REPLY, has_call_brackets, parse_calls
from tests.doubles.mock_openai import MockOpenAIServer, PolicyRequest, SimulatedUserPolicy
from tests.harness.benchmarks.test_acebench_export import end_to_end, process_accuracy
from tests.harness.benchmarks.test_acebench_import import (  # noqa: F401  (fixtures)
    acebench_checkout,
    multi_step_library,
    multi_turn_library,
)
from tests.support.acebench_checkout import AGENT_PROMPTS, FUNCTIONS, MULTI_STEP
from tests.support.cli_process import Finished, harness

# ------------------------------------------------------------------------------------------------ the reader


def calls_of(text: str, *, skip_non_calls: bool = False) -> list[tuple[str, dict[str, Any]]]:
    parsed = parse_calls(text, skip_non_calls=skip_non_calls)
    assert parsed.error is None, parsed.error
    return [(call.name, call.arguments or {}) for call in parsed.calls]


def test_several_calls_with_strings_holding_commas_brackets_and_quotes() -> None:
    text = """[add_note(title='a, b], (c)', text="it's [x]"), turn_on_wifi(), delete_note(note_id=3)]"""
    assert calls_of(text) == [
        ("add_note", {"title": "a, b], (c)", "text": "it's [x]"}),
        ("turn_on_wifi", {}),
        ("delete_note", {"note_id": 3}),
    ]


def test_nested_values_read_as_upstream_reads_them() -> None:
    text = (
        "[book(legs=[{'from': 'A', 'to': ['B', 'C']}, {'seats': [1, [2, 3]]}], options={'meal': {'veg': True, "
        "'extra': None}}, pair=(1, 'x'), refund=-12.5, total=2*3+1, when=tomorrow, at=now(), first=items[0], "
        "more=...)]"
    )
    assert calls_of(text) == [
        (
            "book",
            {
                "legs": [{"from": "A", "to": ["B", "C"]}, {"seats": [1, [2, 3]]}],
                "options": {"meal": {"veg": True, "extra": None}},
                "pair": [1, "x"],  # a tuple crosses to the jail as JSON
                "refund": -12.5,
                "total": 7,
                "when": "tomorrow",  # a name is its own text
                "at": "now()",  # a call without keywords is its source text
                "first": "items[0]",
                "more": "...",
            },
        )
    ]
    # Upstream negates the operand whatever the unary operator; positional arguments are dropped.
    assert calls_of("[f(a=+5)]") == [("f", {"a": -5})]
    assert calls_of("[add_note('x', title='y')]") == [("add_note", {"title": "y"})]


def test_upstreams_repairs_a_missing_bracket_and_a_leading_space() -> None:
    assert calls_of(" add_note(title='x', text='y')") == [("add_note", {"title": "x", "text": "y"})]
    assert calls_of("[turn_on_wifi()") == [("turn_on_wifi", {})]


def test_nothing_the_model_writes_is_evaluated() -> None:
    text = "[add_note(title=__import__('os').system('touch /tmp/acebench-pwned'), text=open('/etc/passwd'))]"
    assert calls_of(text) == [
        ("add_note", {"title": "__import__('os').system('touch /tmp/acebench-pwned')", "text": "open('/etc/passwd')"})
    ]
    assert not Path("/tmp/acebench-pwned").exists()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "the message is empty"),
        ("[add_note(title='x'", "not a Python expression"),
        ("Sure, I will do it: [turn_on_wifi()]", "not a Python expression"),
        ("[f(**options)]", "unpacks arguments"),
        ("[f(a=lambda: 1)]", "unsupported value Lambda"),
        ("[f(a=f'{x}')]", "unsupported value JoinedStr"),
        ("[f(a=b'x')]", "a value JSON cannot carry"),
        ("[f(a={1: 'x'})]", "a dict key that is not a string"),
        ("[f(a=1/0)]", "ZeroDivisionError"),
        ("[f(a=10**1000)]", "an exponent above 64"),
        ("[f(a=x+1)]", "not arithmetic on literals"),
        ("[f(a=1), 2]", "an element is not a function call"),
        ("[" * 5000 + "]" * 5000, "not a Python expression"),
    ],
)
def test_text_that_does_not_read_is_a_recorded_failure(text: str, error: str) -> None:
    parsed = parse_calls(text, skip_non_calls=False)
    assert parsed.calls == [] and parsed.error is not None and error in parsed.error


def test_multi_turn_skips_what_is_not_a_call_and_an_expression_without_calls_has_none() -> None:
    assert calls_of("[f(a=1), 2, g()]", skip_non_calls=True) == [("f", {"a": 1}), ("g", {})]
    assert parse_calls("[Done]", skip_non_calls=False).calls == []
    assert parse_calls("[Done]", skip_non_calls=False).error is None
    assert has_call_brackets("ok [f()] ok") and not has_call_brackets("[f(a=1,\nb=2)]")


# --------------------------------------------------------------------------------------- runs through the CLI


@dataclass
class TextScript:
    """A model that writes ``replies`` in order: the next one is picked by how many ``marker`` lines the history
    in the request holds (each reply of the agent is followed by one, in the setting the test runs)."""

    replies: list[str]
    marker: str

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        request_text = request.messages[-1]["content"]
        done = request_text.count("\n" + self.marker) + request_text.count(" " + self.marker)
        return {"role": "assistant", "content": self.replies[min(done, len(self.replies) - 1)]}


USER_LINE = "Hi, I need a note."
SHOPPING = "[add_note(title='shopping', text='Buy milk')]"


@pytest.fixture(scope="module")
def server() -> Iterator[MockOpenAIServer]:
    mock = MockOpenAIServer()
    mock.set_policy(
        "text-user",
        SimulatedUserPolicy(turns=[USER_LINE, "Title shopping, text Buy milk."], stop_token="finish conversation"),
    )
    with mock.running_in_thread():
        yield mock


def run_text(library: Path, out: Path, server: MockOpenAIServer, model: str, *args: str) -> Finished:
    models = out.parent / f"{out.name}-models.toml"
    lines = []
    for alias, name in (("text-agent", model), ("text-sim", "text-user")):
        lines += [f"[aliases.{alias}]", f'model = "hosted_vllm/{name}"', f'api_base = "{server.base_url}"']
    models.write_text("\n".join(lines) + "\n")
    command = ["run", "--envs", str(library), "--out", str(out), "--model", "text-agent", "--concurrency", "1"]
    command += ["--agent", "acebench-text", "--rules", "acebench-text", *args]
    return harness(command, {"HARNESS_MODELS_FILE": str(models)})


def results(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]


def requests_of(server: MockOpenAIServer, model: str) -> list[dict[str, Any]]:
    return [r.body for r in server.chat_requests(model) if r.body]


def test_multi_step_text_calls_score_as_acebench_and_export_as_written(
    acebench_checkout: Path,  # noqa: F811
    multi_step_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    marker = "execution result:"
    server.set_policy("text-right", TextScript(["I will add it now.", SHOPPING, "finish conversation"], marker))
    wrong = "[add_note(title='shopping', text='Buy bread')]"
    server.set_policy("text-wrong", TextScript([wrong, "finish conversation"], marker))
    task = "acebench-multi-step-en-0"
    right_run, wrong_run = tmp_path / "right", tmp_path / "wrong"
    for model, out in (("text-right", right_run), ("text-wrong", wrong_run)):
        finished = run_text(multi_step_library, out, server, model, "--scenario", task)
        assert finished.code == 0, finished.stderr

    (right,) = results(right_run)
    (wrong_episode,) = results(wrong_run)
    assert right["termination"] == wrong_episode["termination"] == "agent_done"
    assert right["reward"]["state_reward"] == 1.0 and right["reward"]["success"] is True
    assert right["reward"]["process_accuracy"] == 1.0
    assert wrong_episode["reward"]["state_reward"] == 0.0 and wrong_episode["reward"]["success"] is False
    assert wrong_episode["reward"]["process_accuracy"] == 0.0

    # What the model got: upstream's instructions as the system prompt, the template with the function docs
    # (Python's str() of the list) and the history of user and execution lines (never the agent's own).
    system, template = AGENT_PROMPTS["multi_step"]
    question = MULTI_STEP[0][0]
    histories = [
        f"user:{question}\n",
        f"user:{question}\nexecution result:{NOT_CALLS_REPLY}\n",
        f"user:{question}\nexecution result:{NOT_CALLS_REPLY}\nexecution result:[{{'status': True, 'note_id': 2}}]\n",
    ]
    bodies = requests_of(server, "text-right")
    assert [b["messages"] for b in bodies] == [
        [
            {"role": "system", "content": system},
            {"role": "user", "content": template.format(functions=str(FUNCTIONS), history=history)},
        ]
        for history in histories
    ]
    assert all("tools" not in body for body in bodies)

    # The record: the unreadable text, upstream's answer to it, the calls with the text they were written in.
    messages = right["messages"]
    assert messages[0] == {"role": "system", "content": system}
    assert messages[2] == {"role": "assistant", "content": "I will add it now.", "call_text": "I will add it now."}
    assert messages[3] == {"role": "user", "name": "execution", "content": NOT_CALLS_REPLY}
    call_message = messages[4]
    assert call_message["call_text"] == SHOPPING and call_message["content"] is None
    (call,) = call_message["tool_calls"]
    assert call["function"]["name"] == "add_note"
    assert json.loads(call["function"]["arguments"]) == {"title": "shopping", "text": "Buy milk"}
    assert messages[5]["role"] == "tool" and messages[5]["content"] == "[{'status': True, 'note_id': 2}]"
    assert messages[6] == {"role": "assistant", "content": "finish conversation"}
    assert any("unreadable agent output: not calls" in error for error in right["errors"])

    # The export: the process is what the model wrote, and upstream's evaluator gives the run's scores.
    for run, expected_process, correct in (
        (right_run, ["I will add it now.", SHOPPING], True),
        (wrong_run, [wrong], False),
    ):
        out = tmp_path / f"{run.name}-export"
        exported = harness(["export", "acebench", str(run), "--out", str(out)])
        assert exported.code == 0, exported.stderr
        path = out / "result_all/result_en/text-agent/data_agent_multi_step_result.json"
        # Upstream's evaluator reads every task of the category: the two the run did not play are empty results.
        entry, *unplayed = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        assert entry["id"] == "agent_multi_step_0" and entry["process"] == expected_process
        assert unplayed == [{"id": f"agent_multi_step_{n}", "result": [], "process": []} for n in (1, 2)], unplayed
        assert "2 of its 3 tasks have no episode in the run" in exported.stdout
        answer_file = acebench_checkout / "data_all/data_en/possible_answer/data_agent_multi_step.json"
        answer = orjson.loads(answer_file.read_bytes().splitlines()[0])
        assert end_to_end(entry["result"], answer["ground_truth"]) is correct
        assert process_accuracy(entry["process"], answer["mile_stone"]) == (1.0 if correct else 0.0)


def test_text_that_never_reads_runs_into_the_step_limit(
    multi_step_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    server.set_policy("text-never", TextScript(["I cannot do that."], "execution result:"))
    out = tmp_path / "never"
    finished = run_text(
        multi_step_library, out, server, "text-never", "--scenario", "acebench-multi-step-en-0", "--max-steps", "6"
    )
    assert finished.code == 0, finished.stderr
    (episode,) = results(out)
    # Each unreadable message and upstream's answer to it count two of the six messages.
    assert episode["termination"] == "max_steps"
    assert len(requests_of(server, "text-never")) == 3
    assert episode["reward"]["state_reward"] == 0.0 and episode["reward"]["process_accuracy"] == 0.0
    assert [m.get("content") for m in episode["messages"][2:]] == ["I cannot do that.", NOT_CALLS_REPLY] * 3


def test_multi_turn_text_goes_to_the_user_or_to_execution_as_upstream_routes_it(
    multi_turn_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    replies = ["What should the note say?", "[turn_on_wifi()]", SHOPPING, "Done: the note is saved."]
    server.set_policy("text-turns", TextScript(replies, "agent:"))
    out = tmp_path / "turns"
    finished = run_text(
        multi_turn_library,
        out,
        server,
        "text-turns",
        "--scenario",
        "acebench-multi-turn-en-0",
        "--mode",
        "conv",
        "--user-model",
        "text-sim",
    )
    assert finished.code == 0, finished.stderr
    (episode,) = results(out)
    assert episode["termination"] == "user_stop"
    assert episode["reward"]["state_reward"] == 1.0 and episode["reward"]["process_accuracy"] == 1.0
    system, template = AGENT_PROMPTS["multi_turn"]
    last = requests_of(server, "text-turns")[-1]["messages"]
    # multi_turn's system prompt ends with the domain prompt of the involved classes (BaseApi's).
    assert last[0] == {"role": "system", "content": system + "You run a phone."}
    history = (
        f"user:{USER_LINE}\n"
        "agent:What should the note say?\n"
        "user:Title shopping, text Buy milk.\n"
        "agent:[turn_on_wifi()]\n"
        "execution:[{'status': True, 'message': 'wifi is on'}]\n"
        f"agent:{SHOPPING}\n"
        "execution:[{'status': True, 'note_id': 2}]\n"
    )
    assert last[1] == {"role": "user", "content": template.format(functions=str(FUNCTIONS), history=history)}
    # The user saw the agent's text replies, never its calls.
    user_view = requests_of(server, "text-user")[-1]["messages"]
    agent_lines = [m["content"] for m in user_view if m["role"] == "user"][1:]
    assert agent_lines == ["What should the note say?", "Done: the note is saved."]
    assert orjson.loads((out / "manifest.json").read_bytes())["config"]["rules"] == "acebench-text"


def test_the_text_setting_needs_both_its_agent_and_its_rules(
    multi_step_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path: Path,
) -> None:
    base = ["run", "--envs", str(multi_step_library), "--model", "text-agent"]
    native = harness([*base, "--out", str(tmp_path / "a"), "--rules", "acebench-text"])
    assert native.code == 2
    assert native.stderr_lines[-1].endswith(
        "--rules acebench-text runs the agent acebench-text: use --agent acebench-text"
    )
    text_agent = harness([*base, "--out", str(tmp_path / "b"), "--rules", "acebench", "--agent", "acebench-text"])
    assert text_agent.code == 2
    assert text_agent.stderr_lines[-1].endswith("--agent acebench-text runs only under --rules acebench-text")
    one = ["--scenario", "acebench-multi-step-en-0"]
    oracle = harness([*base, *one, "--out", str(tmp_path / "c"), "--rules", "acebench-text", "--agent", "oracle"])
    assert oracle.code == 0, oracle.stderr
    (episode,) = results(tmp_path / "c")
    assert episode["reward"]["state_reward"] == 1.0
