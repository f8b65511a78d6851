"""The gates and bookkeeping of environment synthesis, piece by piece (no model)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from pydantic import ValidationError

from harness.llm.embeddings import cosine, embed
from harness.sandbox import JailSpec
from harness.schema import Environment, Usage
from harness.toolspec import derive_tools
from synth.answers import extract_json, extract_python
from synth.costs import build_cost_report, dollars
from synth.discovery import TaskSourceError, load_tasks, merge_into_themes
from synth.modeling import ModelingError, assemble, build_skeleton, check_method, load_check, state_problems
from synth.records import EnvironmentPlan, TaskOutcome
from synth.stages import StageStore, content_key
from synth.templates import (
    ENVIRONMENT_TEMPLATES,
    TemplateError,
    load_template,
    prompt_versions,
    similar_environments,
    similar_examples,
    worked_example,
)
from tests.doubles.scripted_synth import CANCEL_PERMIT, INITIAL_STATE, METHODS, permit_plan


@pytest.fixture
def plan() -> EnvironmentPlan:
    return EnvironmentPlan.model_validate(permit_plan(None))


def cancel(plan: EnvironmentPlan):
    operation = plan.operation("cancel_permit")
    assert operation is not None
    return operation


# ------------------------------------------------------------------------------------------ method checks


def test_a_correct_method_passes_its_checks(plan: EnvironmentPlan) -> None:
    checked, problems = check_method(CANCEL_PERMIT, cancel(plan), plan)
    assert problems == []
    assert checked is not None and checked.source.startswith("def cancel_permit(self, permit_id: str")


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda s: s.replace('"""Cancel a permit that is active or suspended.', '"""'), "say what the method does"),
        (lambda s: re.sub(r'    """.*?"""\n', "", s, count=1, flags=re.DOTALL), "docstring missing"),
        (lambda s: s.replace("        reason: Why it is cancelled (optional).\n", ""), "missing: ['reason']"),
        (lambda s: s.replace("def cancel_permit", "def cancel"), "the method is named 'cancel'"),
        (lambda s: s.replace("reason: Optional[str] = None", "reason: Optional[str]"), "needs a default"),
        (lambda s: s.replace("permit_id: str,", "permit_id: str = 'P-1',"), "'permit_id' is required"),
        (lambda s: s.replace("permit_id: str,", "permit_id: int,"), "typed int, the plan says str"),
        (lambda s: s.replace("permit_id: str,", "permit_id,"), "has no type hint"),
        (lambda s: s.replace("reason: Optional[str] = None", "*args"), "signature mismatch"),
        (lambda s: s.replace('{"success": True, "message": f"Permit {permit_id} cancelled."}', "True"), "dict literal"),
        (lambda s: s.replace('"error": f"No permit with id {permit_id}."', '"why": "no"'), "must carry an 'error'"),
        (lambda s: s.replace('"message": f"Permit', '"note": f"Permit'), "'data' or 'message'"),
        (lambda s: s.replace('"success": True', '"success": ok'), "literal True or False"),
        (lambda s: s.replace("self.permits.get", "self.registry.get"), "self.registry is neither a state key"),
        (
            lambda s: s.replace("    permit = self.permits.get", "    x = eval('1')\n    permit = self.permits.get"),
            "use of 'eval' is not allowed",
        ),
        (lambda s: s + "\n\ndef helper():\n    return 1\n", "exactly one method definition"),
        (lambda s: "import subprocess\n" + s, "import of 'subprocess' is not allowed"),
    ],
)
def test_each_check_refuses_what_it_guards(plan: EnvironmentPlan, edit, expected: str) -> None:
    source = edit(CANCEL_PERMIT)
    assert source != CANCEL_PERMIT
    checked, problems = check_method(source, cancel(plan), plan)
    assert checked is None
    assert any(expected in p for p in problems), problems


def test_allowed_top_level_imports_are_hoisted_into_the_module(plan: EnvironmentPlan) -> None:
    source = "import statistics\n\n" + CANCEL_PERMIT.replace(
        "    permit = self.permits.get", "    _ = statistics.mean([1, 2])\n    permit = self.permits.get"
    )
    checked, problems = check_method(source, cancel(plan), plan)
    assert problems == [] and checked is not None and checked.imports == ["import statistics"]
    methods = {name: check_method(src, plan.operation(name), plan)[0] for name, src in METHODS.items()}  # type: ignore[arg-type]
    methods["cancel_permit"] = checked
    code = assemble(plan, methods)  # type: ignore[arg-type]
    assert "\nimport statistics\n" in code
    assert [t.function.name for t in derive_tools(code, plan.class_name)] == [o.name for o in plan.operations]


def test_assembly_refuses_a_class_missing_a_planned_tool(plan: EnvironmentPlan) -> None:
    methods = {name: check_method(src, plan.operation(name), plan)[0] for name, src in METHODS.items()}  # type: ignore[arg-type]
    del methods["issue_permit"]
    with pytest.raises(ModelingError, match="the class offers tools"):
        assemble(plan, methods)  # type: ignore[arg-type]


async def test_the_skeleton_is_a_loadable_class_with_no_tools(plan: EnvironmentPlan) -> None:
    skeleton = build_skeleton(plan)
    assert "class PermitRecord(TypedDict):" in skeleton
    assert 'self.permits: dict[str, PermitRecord] = init_config.get("permits", {})' in skeleton
    assert derive_tools(skeleton, plan.class_name) == []
    environment = Environment(id="skeleton", name="s", class_name=plan.class_name, code=skeleton)
    async with JailSpec(workers=1).pool() as pool:
        await load_check(pool, environment, INITIAL_STATE)
        session = await pool.open_session(environment, INITIAL_STATE)
        assert await session.state() == INITIAL_STATE
        await session.close()


# ------------------------------------------------------------------------------------------ plans and states


def test_the_generated_state_must_conform_to_the_plan(plan: EnvironmentPlan) -> None:
    assert state_problems(plan, INITIAL_STATE) == []
    state = json.loads(json.dumps(INITIAL_STATE))
    state["vehicles"] = {}
    del state["current_date"]
    state["permits"]["P-1"]["permit_id"] = "P-9"
    state["permits"]["P-2"]["zone"] = 3
    state["permits"]["P-3"]["colour"] = "red"
    del state["permits"]["P-4"]["holder"]
    problems = state_problems(plan, state)
    assert "missing state key 'current_date'" in problems
    assert "unplanned state key 'vehicles'" in problems
    assert "permits['P-1']: permit_id must equal the id it is stored under" in problems
    assert "permits['P-2'].zone should be str, got int" in problems
    assert "permits['P-3'] has unplanned attributes ['colour']" in problems
    assert "permits['P-4'] lacks ['holder']" in problems
    assert state_problems(plan, [1]) == ["the initial state must be a JSON object"]
    assert state_problems(plan, {**INITIAL_STATE, "permits": {}}) == [
        "permits must be a non-empty object mapping ids to records"
    ]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda p: p["entities"][0].update(key="id"), "key 'id' is not one of its attributes"),
        (lambda p: [o.update(kind="query") for o in p["operations"]], "at least one state_change"),
        (lambda p: p["operations"].append(dict(p["operations"][0])), "operation names repeat"),
        (lambda p: p["operations"][3]["parameters"].reverse(), "required parameter 'permit_id' after an optional"),
        (lambda p: p.update(class_name="parking_permits"), "must be CamelCase"),
        (lambda p: p["operations"][0].update(name="_hidden"), "must be public"),
        (lambda p: p["operations"][0]["parameters"][0].update(type="tuple"), "parameters.0.type"),
        (lambda p: p["scalars"].append({"name": "permits"}), "state keys repeat"),
    ],
)
def test_an_inconsistent_plan_is_refused(edit, expected: str) -> None:
    data = permit_plan(None)
    edit(data)
    with pytest.raises(ValidationError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        EnvironmentPlan.model_validate(data)


# ---------------------------------------------------------------------------------------------- answers


def test_json_is_found_in_fences_prose_and_bare_text() -> None:
    assert extract_json('{"keep": true}') == {"keep": True}
    assert extract_json('Sure!\n```json\n{"keep": false, "reason": "x"}\n```\nDone.') == {"keep": False, "reason": "x"}
    assert extract_json('The answer is {"a": {"b": 1}} as asked.') == {"a": {"b": 1}}
    with pytest.raises(ValueError, match="not JSON"):
        extract_json("no braces here")
    assert extract_python("Here:\n```python\ndef f(self):\n    pass\n```\nbye") == "def f(self):\n    pass"
    assert extract_python("def g(self):\n    pass\n") == "def g(self):\n    pass"


# --------------------------------------------------------------------------------------------- templates


def test_every_template_renders_with_its_fields_and_has_a_version() -> None:
    versions = prompt_versions()
    assert set(versions) == set(ENVIRONMENT_TEMPLATES)
    for name, version in versions.items():
        number, digest = version.split("+")
        assert int(number) >= 1 and len(digest) == 8, name
    with pytest.raises(TemplateError, match="needs the field 'task'"):
        load_template("filter_task").render(example_name="x", example_summary="y")
    example = worked_example()
    assert example.name == "Retail Orders and Returns"
    assert "def get_order_details(self, order_id: str) -> dict:" in example.methods
    messages = load_template("write_method").render(
        introduction="I",
        operations="- o (query): O",
        skeleton="S",
        rules="R",
        operation="O",
        feedback="",
        allowed_modules="re",
        example_name=example.name,
        example_methods=example.methods,
    )
    assert messages[0]["role"] == "system" and "def update_default_address" in messages[0]["content"]
    assert "Returns:" in messages[0]["content"] and "analysis" in messages[0]["content"]
    assert messages[1]["content"].startswith("The environment, as its users see it:\nI\n")
    assert "- o (query): O" in messages[1]["content"] and "Class skeleton:" in messages[1]["content"]


def test_examples_come_from_the_seed_environments_most_like_the_target() -> None:
    assert similar_environments("A hotel: guests book rooms, check in and check out.")[0] == "hotel_booking"
    assert similar_environments("Patients book clinic appointments with doctors.")[0] == "clinic_appointments"
    assert similar_environments("zzz qqq")[0] == "retail_orders"  # nothing in common: the default example
    shown = similar_examples("Renting cars from branches; reservations and returns of vehicles.")
    assert shown.name.startswith(worked_example("car_rental").name) and " and " in shown.name
    assert "# from " in shown.methods and shown.methods.count("def ") >= 3


def test_a_method_without_a_returns_section_is_refused(plan: EnvironmentPlan) -> None:
    operation = plan.operation("cancel_permit")
    assert operation is not None
    without = CANCEL_PERMIT.replace("    Returns:\n        message (string): A confirmation.\n", "")
    assert without != CANCEL_PERMIT
    checked, problems = check_method(without, operation, plan)
    assert checked is None and any("Returns: section" in p for p in problems)
    assert check_method(CANCEL_PERMIT, operation, plan)[1] == []


# ------------------------------------------------------------------------------------------------- costs


def test_dollars_follow_the_price_table() -> None:
    usage = Usage(requests=2, prompt_tokens=1_000_000, completion_tokens=500_000)
    assert dollars(usage, "gpt-4.1") == pytest.approx(2.0 + 4.0)
    report = build_cost_report(
        {"discovery": Usage(prompt_tokens=1_000_000), "assessment": Usage(completion_tokens=1_000_000)},
        {"env_a": {"assessment": Usage(completion_tokens=250_000)}},
    )
    assert [s.stage for s in report.stages] == ["discovery", "planning", "modeling", "assessment", "repair"]
    assert report.total.usd == pytest.approx(10.0)
    assert report.usd_per_accepted == pytest.approx(10.0)
    assert report.environments[0].usd == pytest.approx(2.0)
    assert build_cost_report({}, {}).usd_per_accepted is None


# -------------------------------------------------------------------------------------- tasks and stages


def test_tasks_load_from_json_lines_and_dataset_folders(tmp_path: Path) -> None:
    lines = tmp_path / "tasks.jsonl"
    lines.write_text(
        '{"query": "Book a room"}\n\n{"query": "Book a room"}\n"Cancel my order"\n{"query": "Pay a fine"}\n'
    )
    assert load_tasks(str(lines), column="query") == ["Book a room", "Cancel my order", "Pay a fine"]
    assert load_tasks(str(lines), column="query", limit=2) == ["Book a room", "Cancel my order"]
    with pytest.raises(TaskSourceError, match=r"tasks.jsonl:1: no text field 'task'"):
        load_tasks(str(lines))
    folder = tmp_path / "hub_style"
    folder.mkdir()
    (folder / "train.jsonl").write_text(
        '{"instruction": "Renew my library loan", "id": 1}\n{"instruction": "Reserve a table for two", "id": 2}\n'
    )
    assert load_tasks(str(folder), column="instruction") == ["Renew my library loan", "Reserve a table for two"]
    with pytest.raises(TaskSourceError, match="has no column 'task'"):
        load_tasks(str(folder))


def test_stage_outputs_are_keyed_by_content_and_written_whole(tmp_path: Path) -> None:
    assert content_key("a", {"x": 1, "y": 2}) == content_key("a", {"y": 2, "x": 1})
    assert content_key("a", 1) != content_key("a", 2)
    store = StageStore(tmp_path)
    assert store.load("planning", "k") is None
    store.save("planning", "k", {"plan": None, "reason": "r"})
    assert store.load("planning", "k") == {"plan": None, "reason": "r"}
    assert [p.name for p in (tmp_path / "stages" / "planning").iterdir()] == ["k.json"]
    assert store.count("planning") == 1


# -------------------------------------------------------------------------------------------- embeddings


async def test_the_bundled_embedding_model_merges_near_duplicate_descriptions() -> None:
    a = "A municipal parking permit office that issues and cancels residents' permits."
    b = "A municipal parking permit office that issues and cancels permits for residents."
    c = "A bakery's online shop selling bread and cakes for delivery."
    vectors = await embed([a, b, c])
    assert len(vectors) == 3 and len(vectors[0]) == 384
    assert cosine(vectors[0], vectors[1]) > 0.9 > cosine(vectors[0], vectors[2])
    outcomes = [TaskOutcome(task=f"t{i}", keep=True, reason="r", description=d) for i, d in enumerate([a, b, c])]
    outcomes.append(TaskOutcome(task="t3", keep=False, reason="stateless"))
    themes = await merge_into_themes(outcomes, similarity=0.9)
    assert [t.tasks for t in themes] == [["t0", "t1"], ["t2"]]
    assert [t.description for t in themes] == [a, c]
    assert await embed([]) == []


@pytest.fixture
async def embedding_server() -> AsyncIterator[str]:
    seen: list[dict] = []

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(text)), 1.0, float(i)]}
            for i, text in enumerate(body["input"])
        ]
        data.reverse()  # clients must order by index
        return web.json_response(
            {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 3, "total_tokens": 3}}
        )

    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


async def test_any_litellm_embedding_model_is_reached_over_http(embedding_server: str) -> None:
    vectors = await embed(
        ["ab", "abcd"], model="openai/text-embedding-3-small", api_base=embedding_server, api_key="sk-test"
    )
    assert vectors == [[2.0, 1.0, 0.0], [4.0, 1.0, 1.0]]
