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
