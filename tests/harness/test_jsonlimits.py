"""The bound on decoded strings that lets a large reply skip the scalar walk, and the checks that rely on it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.jsonlimits import JSONLimits, UnsafeJSON, check_decoded_json, longest_string_bound

LIMITS = JSONLimits(max_depth=96, max_items=2_000_000, max_string_chars=1_000)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=20), children, max_size=6),
    max_leaves=60,
)


def strings_of(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [*value, *(s for member in value.values() for s in strings_of(member))]
    if isinstance(value, list):
        return [s for member in value for s in strings_of(member)]
    return []


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(min_value=1, max_value=9))
def test_the_bound_is_never_below_the_longest_string_or_key(value: Any, stride: int) -> None:
    encoded = orjson.dumps(value)
    longest = max((len(s) for s in strings_of(value)), default=0)
    assert longest_string_bound(encoded, stride) >= longest


def test_a_large_text_of_short_strings_is_bounded_by_twice_the_stride() -> None:
    state = {"rows": [{"name": f"user {n}", "city": "Lyon"} for n in range(20_000)]}
    encoded = orjson.dumps(state)
    assert len(encoded) > 500_000
    assert longest_string_bound(encoded, 256) <= 510


def test_a_long_string_deep_in_a_large_text_is_measured_exactly() -> None:
    state = {"rows": [{"name": f"user {n}"} for n in range(20_000)]}
    state["rows"][12_345]["notes"] = {"deep": ["x" * 5_000]}
    encoded = orjson.dumps(state)
    assert longest_string_bound(encoded, 256) == 5_000


def test_escaped_quotes_make_the_whole_text_the_bound() -> None:
    # The decoded string is 2,001 characters, but no run between two quote bytes is longer than 1,001.
    hidden = "a" * 1_000 + '"' + "b" * 1_000
    encoded = orjson.dumps({"rows": ["short"] * 50_000, "text": hidden})
    assert b'\\"' in encoded
    assert longest_string_bound(encoded, 256) == len(encoded)


def test_the_checks_refuse_a_long_string_the_bound_reports_and_pass_a_large_plain_value() -> None:
    plain = {"rows": [{"name": f"user {n}"} for n in range(20_000)]}
    check_decoded_json(plain, LIMITS, longest_string_bound(orjson.dumps(plain), 256))
    plain["rows"][7]["bio"] = "z" * 1_001
    with pytest.raises(UnsafeJSON, match="holds a string of 1,001 characters; the limit is 1,000"):
        check_decoded_json(plain, LIMITS, longest_string_bound(orjson.dumps(plain), 256))


def test_escaped_quotes_cannot_hide_a_long_string_from_the_checks() -> None:
    value = {"rows": ["short"] * 50_000, "text": "a" * 600 + '"' + "b" * 600}
    with pytest.raises(UnsafeJSON, match="holds a string of 1,201 characters"):
        check_decoded_json(value, LIMITS, longest_string_bound(orjson.dumps(value), 256))


def test_a_bound_within_the_string_limit_still_checks_nesting_and_items() -> None:
    deep: Any = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(UnsafeJSON, match="nests more than 96 levels deep"):
        check_decoded_json({"deep": deep}, LIMITS, 10)
    with pytest.raises(UnsafeJSON, match="holds more than 10 keys and items"):
        check_decoded_json(list(range(11)), JSONLimits(max_depth=4, max_items=10, max_string_chars=5), 1)
