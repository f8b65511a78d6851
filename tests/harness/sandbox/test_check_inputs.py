"""The check request's layout: the JSON message, a NUL byte, then each episode's three JSON texts with their sizes."""

from __future__ import annotations

import orjson
import pytest

from harness.sandbox.check_batches import encode_inputs
from harness.sandbox.check_inputs import check_request, read_check_request


def test_episodes_come_back_as_sent_whatever_their_texts_hold():
    first = encode_inputs({"note": 'a "quoted" \\0 text', "n": 1}, {"n": 2}, [{"role": "user", "content": "hi"}])
    same = {"same": ["state"]}
    second = encode_inputs(same, same, [])
    message, inputs = read_check_request(check_request({"checks": [{"source": "x"}], "timeout": 2.0}, [first, second]))
    assert message == {"checks": [{"source": "x"}], "timeout": 2.0}
    decoded = [[orjson.loads(part) for part in episode] for episode in inputs]
    assert decoded == [
        [{"note": 'a "quoted" \\0 text', "n": 1}, {"n": 2}, [{"role": "user", "content": "hi"}]],
        [same, same, []],
    ]


@pytest.mark.parametrize("cut", [1, 13, 20])
def test_a_request_cut_short_is_refused(cut: int):
    body = check_request({"checks": []}, [encode_inputs({"a": 1}, {"a": 2}, [])])
    with pytest.raises(ValueError, match="ends inside an episode"):
        read_check_request(body[:-cut])


def test_a_text_the_request_already_carried_is_carried_once_and_read_back_for_each_episode():
    state = {"db": {"rows": list(range(2000))}}
    changed = {"db": {"rows": list(range(1999))}}
    episodes = [
        encode_inputs(state, state, []),  # the reset: its final state is its initial one
        encode_inputs(state, state, [{"role": "user", "content": "hi"}]),
        encode_inputs(state, changed, []),
        encode_inputs(state, dict(state), []),  # another object, the same text
    ]
    body = check_request({"checks": []}, episodes)
    once = len(orjson.dumps(state))
    assert once < len(body) < 2 * once + len(orjson.dumps(changed))  # the state once, the changed state once
    _, inputs = read_check_request(body)
    decoded = [[orjson.loads(part) for part in episode] for episode in inputs]
    assert decoded == [
        [state, state, []],
        [state, state, [{"role": "user", "content": "hi"}]],
        [state, changed, []],
        [state, state, []],
    ]


def test_a_request_that_repeats_a_text_it_has_not_carried_is_refused():
    body = bytearray(check_request({"checks": []}, [encode_inputs({"a": 1}, {"a": 2}, [])]))
    header = body.index(b"\0") + 1
    body[header : header + 4] = ((1 << 31) | 5).to_bytes(4, "little")  # the initial state: "the sixth text"
    with pytest.raises(ValueError, match="has not carried"):
        read_check_request(bytes(body))


class Huge(bytes):
    """A text that says it is 2 GiB long, without holding 2 GiB."""

    def __len__(self) -> int:
        return 1 << 31


def test_an_input_too_large_for_its_size_field_is_refused_not_misread():
    initial, _final, transcript = encode_inputs({"a": 1}, {"a": 2}, [])
    with pytest.raises(ValueError, match="2 GiB"):
        check_request({"checks": []}, [(initial, Huge(b"x"), transcript)])
