"""The deterministic parts of chains-to-scenarios: checks from the gold state, turns, and the refinement rules'
own checks (the model-backed steps run end to end in test_synth_scen_e2e.py)."""

from __future__ import annotations

import random

import pytest

from harness.library import load_library
from harness.sandbox import JailSpec, SandboxPool
from harness.schema import Scenario, ToolCall
from leaderboards.verdicts import closed_gates
from synth.gold_checks import gated_source
from synth.mentions import gate_mentions, required_mentions
from synth.queries import ExecutedCall, checks_from_gold, is_free_text, refine_contexts, split_turns
from synth.refine import RULES, RefineContext, applies, problems

LIBRARY = load_library()
RETAIL = LIBRARY.environments["retail_orders"]
SEED = {s.id: s for s in LIBRARY.scenarios}


@pytest.fixture
async def pool():
    async with JailSpec(workers=2).pool() as sandbox:
        yield sandbox


async def _final_state(pool: SandboxPool, state: dict, calls: list[tuple[str, dict]]) -> dict:
    session = await pool.open_session(RETAIL, state)
    try:
        for n, (name, arguments) in enumerate(calls):
            observation, _ = await session.call(ToolCall(id=f"x{n}", name=name, arguments=arguments))
            assert observation.ok, observation.error
        return await session.state()
    finally:
        await session.close()


async def test_checks_from_the_gold_state_score_by_state(pool: SandboxPool) -> None:
    scenario = SEED["retail_orders-008"]  # cancel an order and place a new one
    state = scenario.initial_state
    actions = [(a.name, a.arguments) for a in scenario.reference_actions]
    gold = await _final_state(pool, state, actions)
    reasons = {a.arguments["reason"] for a in scenario.reference_actions if "reason" in a.arguments}
    checks = checks_from_gold(state, gold, reasons)
    at_reset = await pool.run_checks(checks, state, state)
    on_gold = await pool.run_checks(checks, state, gold)
    assert all(r.error is None for r in at_reset)
    assert not all(r.passed for r in at_reset)
    assert all(r.passed for r in on_gold), [(r.check_id, r.error, r.value) for r in on_gold]
    assert any("A new orders record" in c.description for c in checks)
    assert any(c.description == "No other orders record changed." for c in checks)

    # Another wording of the free-text reason is as good: it is masked, not compared.
    reworded = [(n, {**a, "reason": "plans changed"} if "reason" in a else a) for n, a in actions]
    other = await _final_state(pool, state, reworded)
    assert all(r.passed for r in await pool.run_checks(checks, state, other))

    # Doing only the cancellation leaves the new order's check false.
    half = await _final_state(pool, state, [x for x in actions if x[0] != "place_order"])
    assert not all(r.passed for r in await pool.run_checks(checks, state, half))


async def test_a_collateral_change_fails_the_nothing_else_changed_check(pool: SandboxPool) -> None:
    scenario = SEED["retail_orders-001"]
    state = scenario.initial_state
    gold = await _final_state(pool, state, [("cancel_order", {"order_id": "O-1002", "reason": "x"})])
    checks = checks_from_gold(state, gold, {"x"})
    other_order = next(k for k, o in state["orders"].items() if k != "O-1002" and o["status"] == "pending")
    collateral = await _final_state(
        pool,
        state,
        [
            ("cancel_order", {"order_id": "O-1002", "reason": "x"}),
            ("cancel_order", {"order_id": other_order, "reason": "x"}),
        ],
    )
    results = {
        c.description: r.passed for c, r in zip(checks, await pool.run_checks(checks, state, collateral), strict=True)
    }
    assert results["No other orders record changed."] is False


async def test_the_nothing_else_changed_check_counts_only_once_the_change_is_made(pool: SandboxPool) -> None:
    scenario = SEED["retail_orders-001"]
    state = scenario.initial_state
    cancel = ("cancel_order", {"order_id": "O-1002", "reason": "x"})
    gold = await _final_state(pool, state, [cancel])
    checks = checks_from_gold(state, gold, {"x"})
    guard = next(c for c in checks if c.description == "No other orders record changed.")
    gate = next(c for c in checks if c.id == guard.gate)
    assert gate.description.startswith("orders O-1002:"), "gated on the change it guards"
    guards = [c for c in checks if c.description.startswith("No other ")]
    assert all(c.gate is not None for c in guards) and all(c.gate is None for c in checks if c not in guards)
    Scenario(id="s", environment_id="retail_orders", initial_state=state, task="t", checks=checks)  # gates resolve

    def verdicts(results: list) -> dict[str, bool]:
        return {r.check_id: r.passed for r in results}

    at_reset = await pool.run_checks(checks, state, state)
    assert all(r.error is None for r in at_reset)
    assert not any(verdicts(at_reset)[c.id] for c in guards), "doing nothing earns nothing"
    assert closed_gates(at_reset, checks) == {c.id: c.gate for c in guards}, "pages show them as not evaluated"
    assert all(r.passed for r in await pool.run_checks(checks, state, gold))
    other_order = next(k for k, o in state["orders"].items() if k != "O-1002" and o["status"] == "pending")
    collateral = await _final_state(pool, state, [cancel, ("cancel_order", {"order_id": other_order, "reason": "x"})])
    on_collateral = await pool.run_checks(checks, state, collateral)
    assert verdicts(on_collateral)[guard.id] is False and verdicts(on_collateral)[gate.id] is True
    assert closed_gates(on_collateral, checks) == {}, "a collateral change is a mistake of its own"


def test_a_gated_source_needs_check_functions_it_can_rename() -> None:
    with pytest.raises(ValueError, match="a gated check needs sources that start with"):
        gated_source("def check_func(final_state):\n    return True\n", "def check(initial_state, final_state):\n")


def test_turns_cover_the_chain_in_order_with_at_most_k_calls() -> None:
    for seed in range(50):
        count = random.Random(seed).randint(1, 15)
        turns = split_turns(count, 5, random.Random(seed))
        assert [i for turn in turns for i in turn] == list(range(count))
        assert all(1 <= len(turn) <= 5 for turn in turns)


RETAIL_STATE = LIBRARY.scenarios_for("retail_orders")[0].initial_state
MARIA = RETAIL_STATE["users"]["U-101"]
MARIA_ORDERS = [o for o in RETAIL_STATE["orders"].values() if o["user_id"] == "U-101"]


def _executed() -> list[ExecutedCall]:
    return [
        ExecutedCall(
            name="find_user_by_email",
            arguments={"email": "maria.garcia@example.com"},
            result=MARIA,
            user_arguments=["email"],
        ),
        ExecutedCall(name="list_user_orders", arguments={"user_id": "U-101"}, result=MARIA_ORDERS),
        ExecutedCall(
            name="cancel_order",
            arguments={"order_id": "O-1002", "reason": "changed my mind"},
            user_arguments=["reason"],
            masked_arguments=["reason"],
            changed_state=True,
        ),
        ExecutedCall(
            name="update_default_address",
            arguments={"user_id": "U-101", "address": "9 Bay St, Austin, TX"},
            user_arguments=["address"],
            changed_state=True,
        ),
    ]


def test_refine_contexts_keep_user_values_and_the_records_acted_on() -> None:
    assert len(MARIA_ORDERS) > 1  # which order to cancel is the person's choice, not something to look up
    contexts = refine_contexts(_executed(), [[0, 1, 2], [3]], RETAIL.tool_names, RETAIL_STATE)
    first, second = contexts
    assert first.must_keep == ["maria.garcia@example.com", "O-1002"]
    assert "U-101" in first.lookup_values and "O-1002" not in first.lookup_values
    assert "changed my mind" not in first.must_keep  # free text is masked, not kept verbatim
    # U-101 is pinned down by the lookup by email: the request need not say it.
    assert second.must_keep == ["9 Bay St, Austin, TX"]
    assert "maria.garcia@example.com" in second.referable and "U-101" in second.referable
    assert is_free_text("reason", "changed my mind") and not is_free_text("email", "a@b.c")


def test_the_maria_garcia_request_is_rejected() -> None:
    """'Please place order for Maria Garcia.' while the checks demand product P-201 and payment PM-1."""
    maria_by_name = [u for u in RETAIL_STATE["users"].values() if "Maria Garcia" in u["name"]]
    payment_methods = [p for p in RETAIL_STATE["payment_methods"].values() if p["user_id"] == "U-101"]
    executed = [
        ExecutedCall(
            name="find_users_by_name", arguments={"name": "Maria Garcia"}, result=maria_by_name, user_arguments=["name"]
        ),
        ExecutedCall(
            name="get_user_details", arguments={"user_id": "U-101"}, result={"payment_methods": payment_methods}
        ),
        ExecutedCall(
            name="place_order",
            arguments={"user_id": "U-101", "items": {"P-201": 2}, "payment_method_id": "PM-1"},
            result={"order_id": "O-1013"},
            user_arguments=["items"],
            changed_state=True,
        ),
    ]
    required = required_mentions(executed, RETAIL_STATE)
    # The product inside the items dict, and the card among Maria's two; U-101 is the one user found by name.
    assert required == [["Maria Garcia"], [], ["P-201", "PM-1"]]
    flat = [value for values in required for value in values]
    gate = gate_mentions("Please place order for Maria Garcia.", flat)
    assert not gate.passed and gate.gate == "mentions"
    assert gate.details["missing"] == ["P-201", "PM-1"]
    assert "P-201" in gate.reason
    fixed = gate_mentions("Please order two P-201 mice for Maria Garcia and pay with card PM-1.", flat)
    assert fixed.passed


def _context(**overrides) -> RefineContext:
    base = RefineContext(
        turn=1,
        tool_names=RETAIL.tool_names,
        must_keep=["9 Bay St, Austin, TX"],
        referable=["maria.garcia@example.com", "O-1002"],
        lookup_values=["U-101"],
        calls=[{"name": "list_user_orders"}, {"name": "update_default_address"}],
    )
    for key, value in overrides.items():
        setattr(base, key, value)
    return base


def test_implicit_reference_rule() -> None:
    before = "For maria.garcia@example.com, set the default address to 9 Bay St, Austin, TX."
    context = _context()
    assert applies("implicit_reference", before, context)
    assert not applies("implicit_reference", before, _context(turn=0))
    assert (
        problems("implicit_reference", before, "On my account, make 9 Bay St, Austin, TX my default address.", context)
        == []
    )
    still = problems(
        "implicit_reference", before, "Set maria.garcia@example.com's address to 9 Bay St, Austin, TX please.", context
    )
    assert any("repeats values from earlier turns" in p for p in still)


def test_action_compression_rule() -> None:
    before = "Look up my orders with list_user_orders, then use update_default_address to set 9 Bay St, Austin, TX."
    context = _context()
    assert applies("action_compression", before, context)
    assert problems("action_compression", before, "Please make 9 Bay St, Austin, TX my default address.", context) == []
    named = problems("action_compression", before, "Call update_default_address with 9 Bay St, Austin, TX.", context)
    assert any("names tools" in p for p in named)
    longer = problems("action_compression", before, before + " " + "Thank you so much, really. " * 6, context)
    assert any("longer" in p for p in longer)


def test_ambiguity_injection_rule() -> None:
    before = "Update the default address of customer U-101 to 9 Bay St, Austin, TX."
    context = _context()
    assert applies("ambiguity_injection", before, context)
    assert not applies("ambiguity_injection", "Update my address to 9 Bay St, Austin, TX.", context)
    assert problems("ambiguity_injection", before, "Update my default address to 9 Bay St, Austin, TX.", context) == []
    spelled = problems(
        "ambiguity_injection", before, "Customer U-101: default address 9 Bay St, Austin, TX, please.", context
    )
    assert any("still spelled out" in p for p in spelled)
    dropped = problems("ambiguity_injection", before, "Update my default address to my new place.", context)
    assert any("drops what only the user can say" in p for p in dropped)


def test_goal_expansion_rule() -> None:
    before = "Set my default address to 9 Bay St, Austin, TX."
    context = _context()
    assert applies("goal_expansion", before, context)
    after = "I just moved for a new job, so please set my default address to 9 Bay St, Austin, TX for future orders."
    assert problems("goal_expansion", before, after, context) == []
    assert any(
        "adds no context" in p for p in problems("goal_expansion", before, "Address: 9 Bay St, Austin, TX.", context)
    )
    assert all(problems(rule, before, before, context) for rule in RULES)


def test_the_journal_drops_a_torn_last_line_and_keeps_the_rest(tmp_path) -> None:
    from synth.scenarios import AttemptRecord, Journal, summarize_attempts

    path = tmp_path / "attempts.jsonl"
    journal = Journal(path)
    journal.append(AttemptRecord(key="a", environment_id="e", index=0, accepted=True))
    journal.append(AttemptRecord(key="b", environment_id="e", index=1, accepted=False, rejected_by="single_call"))
    with path.open("ab") as handle:
        handle.write(b'{"key": "c", "environment_id"')  # a run killed mid-write
    reopened = Journal(path)
    assert set(reopened.records) == {"a", "b"} and "c" not in reopened
    assert path.read_bytes().endswith(b"\n")
    report = summarize_attempts(list(reopened.records.values()))
    assert (report.attempted, report.accepted, report.rejected_by) == (2, 1, {"single_call": 1})


@pytest.mark.parametrize("rule", RULES)
def test_each_refinement_rule_accepts_the_worked_example_its_prompt_shows(rule) -> None:
    """The example a refinement prompt shows the model is one the rule applies to and whose rewrite it keeps."""
    import json
    import re

    from synth.answers import extract_analysis, extract_json
    from synth.templates import load_template

    system = load_template(f"query_refine_{rule}").render(request="x", context="{}")[0]["content"]
    example = re.search(r"Worked example\.\nRequest: (.*)\nContext: (.*)\nAnswer:\n(.*)", system, re.DOTALL)
    assert example is not None
    before, payload, answer = example.group(1), json.loads(example.group(2)), example.group(3)
    after = extract_json(answer)["request"]
    assert extract_analysis(answer).startswith(("the ", "finding", "U-101", "a changed"))
    context = RefineContext(
        turn=len(payload["previous_requests"]),
        tool_names=RETAIL.tool_names,
        must_keep=payload["must_keep"],
        referable=payload.get("refer_to_implicitly", []),
        lookup_values=payload.get("may_be_vague", []),
        calls=[{"name": s["name"], "changed_state": s["changes_state"]} for s in payload.get("steps", [])],
        previous_requests=payload["previous_requests"],
    )
    assert applies(rule, before, context)
    assert problems(rule, before, after, context) == []
    # The rule's own check still refuses the unrewritten request.
    assert problems(rule, before, before, context)


async def test_the_reference_keeps_only_the_calls_it_needs(pool: SandboxPool) -> None:
    from harness.schema import ReferenceAction, Scenario
    from synth.verification import minimize_reference

    state = RETAIL_STATE
    executed = [
        # A lookup before a change in the same turn, whose result no later call uses.
        ExecutedCall(
            name="get_product", arguments={"product_id": "P-201"}, result={"data": state["products"]["P-201"]}
        ),
        ExecutedCall(
            name="cancel_order",
            arguments={"order_id": "O-1002", "reason": "changed my mind"},
            masked_arguments=["reason"],
            changed_state=True,
        ),
        # A lookup whose result (the user id) the next call uses, and the request does not say.
        ExecutedCall(name="find_user_by_email", arguments={"email": "maria.garcia@example.com"}, result=MARIA),
        # Two writes of the same field: the first is overwritten.
        ExecutedCall(
            name="update_default_address",
            arguments={"user_id": "U-101", "address": "1 First St, Austin, TX"},
            changed_state=True,
        ),
        ExecutedCall(
            name="update_default_address",
            arguments={"user_id": "U-101", "address": "9 Bay St, Austin, TX"},
            changed_state=True,
        ),
    ]
    actions = [(c.name, c.arguments) for c in executed]
    gold = await _final_state(pool, state, actions)
    scenario = Scenario(
        id="retail-min",
        environment_id="retail_orders",
        initial_state=state,
        task="Cancel order O-1002. I'm maria.garcia@example.com; my address is now 9 Bay St, Austin, TX.",
        checks=checks_from_gold(state, gold, {"changed my mind"}),
        reference_actions=[
            ReferenceAction(name=c.name, arguments=c.arguments, masked_arguments=c.masked_arguments) for c in executed
        ],
        gold_final_state=gold,
        tags=["calls:5"],
    )
    shorter = await minimize_reference(pool, RETAIL, scenario, executed, [[0, 1], [2, 3, 4]])
    assert [(a.name, a.arguments.get("address")) for a in shorter.reference_actions] == [
        ("cancel_order", None),
        ("find_user_by_email", None),
        ("update_default_address", "9 Bay St, Austin, TX"),
    ]
    assert [d["index"] for d in shorter.provenance.details["dropped_calls"]] == [0, 3]
    assert shorter.tags == ["calls:3"] and shorter.gold_final_state == gold
    results = await pool.run_checks(
        shorter.checks,
        state,
        await _final_state(pool, state, [(a.name, a.arguments) for a in shorter.reference_actions]),
    )
    assert all(r.passed for r in results)
