"""The checks of one batch run in one process, yet none changes how another is evaluated.

Each attack is the first check of a batch (it passes the static lint: it reaches the process through attributes of
allowed modules); the checks after it are honest and read exactly what the attack rebinds. Their results must be
their own: the true one passes, the false one fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from harness.sandbox import JailSpec, find_problems
from harness.sandbox.check_batches import encode_inputs
from harness.sandbox.check_inputs import check_request
from harness.schema import Check, Scenario
from tests.support.cli_process import harness_cli
from tests.support.jail_library import REPO, hostile_scenario, write_hostile_library

ATTACKS = {
    "evaluator": (
        "import typing\n"
        "def check(initial_state, final_state):\n"
        "    runtime = typing.sys.modules['harness.sandbox.runtime']\n"
        "    runner = typing.sys.modules['harness.sandbox.check_runner']\n"
        "    forged = {'passed': True, 'value': None, 'error': None}\n"
        "    runner._run_check = lambda *a, **k: (forged, None)\n"
        "    runner.run_checks = lambda *a, **k: {'ok': True, 'results': [forged] * 8}\n"
        "    runner.guarded = lambda *a, **k: True\n"
        "    runtime.load_module = lambda *a, **k: {'check': lambda *b: True}\n"
        "    runtime.restricted_builtins = lambda: {'len': lambda x: 1}\n"
        "    return True\n"
    ),
    "builtins": (
        "import typing\n"
        "def check(initial_state, final_state):\n"
        "    real = typing.sys.modules['builtins']\n"
        "    real.len = lambda value: 1\n"
        "    real.isinstance = lambda *a: True\n"
        "    real.sorted = lambda value, **k: [1]\n"
        "    return True\n"
    ),
    "shared helpers": (
        "import collections\n"
        "import math\n"
        "import re\n"
        "import typing\n"
        "def check(initial_state, final_state):\n"
        "    math.floor = lambda value: 1\n"
        "    re.match = lambda *a, **k: True\n"
        "    collections.Counter.most_common = lambda self, n=None: [('b', 1)]\n"
        "    typing.sys.modules['copy']._deepcopy_dispatch[dict] = lambda x, memo, deepcopy: {'k': 1}\n"
        "    typing.sys.setrecursionlimit(60)\n"
        "    return True\n"
    ),
    "its own namespace": (
        "import operator\n"
        "import typing\n"
        "def check(initial_state, final_state):\n"
        "    changed = 0\n"
        "    for name, module in list(typing.sys.modules.items()):\n"
        "        if name.startswith('check_'):\n"
        "            names = operator.attrgetter('__dict__')(module)['__builtins__']\n"
        "            names['len'] = lambda value: 1\n"
        "            names['sorted'] = lambda value, **k: [1]\n"
        "            changed += 1\n"
        "    return changed >= 1\n"
    ),
    "frames and tracers": (
        "import operator\n"
        "import typing\n"
        "def check(initial_state, final_state):\n"
        "    sys = typing.sys\n"
        "    refused = 0\n"
        "    try:\n"
        "        sys.settrace(lambda *a: None)\n"
        "    except AttributeError:\n"
        "        refused += 1\n"
        "    try:\n"
        "        raise ValueError('x')\n"
        "    except ValueError:\n"
        "        trace = sys.exc_info()[2]\n"
        "    try:\n"
        "        frame = operator.attrgetter('tb_frame')(trace)\n"
        "    except AttributeError:\n"
        "        return refused == 1  # true when both routes were refused\n"
        "    while frame is not None:\n"
        "        for value in operator.attrgetter('f_locals')(frame).values():\n"
        "            if isinstance(value, list):\n"
        "                value.append(b'{\"passed\":true}')\n"
        "        frame = operator.attrgetter('f_back')(frame)\n"
        "    return 'walked the frames'\n"
    ),
}

# Honest checks reading what the attacks rebind: one holds on the state, one does not.
TRUE_PROBE = (
    "import collections\n"
    "import copy\n"
    "import math\n"
    "import re\n"
    "def check(initial_state, final_state):\n"
    "    counted = collections.Counter('aab').most_common(1)\n"
    "    copied = copy.deepcopy({'k': [1, 2]})\n"
    "    deep = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n"
    "    return (\n"
    "        len(final_state['loot']) == 0 and math.floor(2.5) == 2 and counted == [('a', 2)]\n"
    "        and copied == {'k': [1, 2]} and sorted([2, 1]) == [1, 2] and re.match('b', 'a') is None\n"
    "        and copy.deepcopy(deep) == deep\n"
    "    )\n"
)
FALSE_PROBE = (
    "import math\n"
    "import re\n"
    "def check(initial_state, final_state):\n"
    "    return len(final_state['loot']) == 1 or math.floor(2.5) == 1 or re.match('b', 'a') is not None\n"
)


def batch(attack: str) -> list[Check]:
    return [
        Check(id="attack", description="reaches the process", source=attack),
        Check(id="holds", description="true on the state", source=TRUE_PROBE),
        Check(id="fails", description="false on the state", source=FALSE_PROBE),
    ]


def test_the_attacks_pass_the_static_lint():
    for source in [*ATTACKS.values(), TRUE_PROBE, FALSE_PROBE]:
        assert not find_problems(source), find_problems(source)


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_a_check_cannot_change_how_the_next_checks_of_its_batch_are_evaluated(attack):
    state = {"counter": 1, "loot": [], "flag": "honest"}
    async with JailSpec().pool() as pool:
        results = await pool.run_checks(batch(ATTACKS[attack]), state, state)
    assert [(r.check_id, r.passed) for r in results] == [("attack", True), ("holds", True), ("fails", False)], results
    assert results[2].value == "False"


def test_run_checks_in_a_process_of_its_own_keeps_each_result_its_own():
    """``run_checks`` called directly (the check process's entry point), every attack in one batch, with the inputs
    as the pool sends them (``encode_inputs``, read back by ``read_check_request``)."""
    sources = [source for attack in ATTACKS.values() for source in (attack, TRUE_PROBE, FALSE_PROBE)]
    script = (
        "import orjson, sys\n"
        "from harness.sandbox import JailSpec, check_inputs, check_runner, runtime\n"
        "runtime.prepare_interpreter()\n"
        "request, inputs = check_inputs.read_check_request(sys.stdin.buffer.read())\n"
        "settings = runtime.Settings(5.0, 1 << 20, 1 << 24)\n"
        "reply = check_runner.run_checks(request, inputs, settings, isolated=True)\n"
        "sys.stdout.buffer.write(orjson.dumps(reply))\n"
    )
    state = {"counter": 1, "loot": [], "flag": "honest"}
    body = check_request({"checks": [{"source": s} for s in sources]}, [encode_inputs(state, state, [])])
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=body,
        capture_output=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    results = orjson.loads(done.stdout)["results"]
    assert len(results) == len(sources)
    for index in range(0, len(sources), 3):
        assert results[index + 1]["passed"] is True, (index, results[index + 1])
        assert results[index + 2]["passed"] is False, (index, results[index + 2])
    assert results[9]["passed"] is True, results[9]  # the tracer and the frame walk were refused


def test_a_run_scores_each_check_on_its_own_whatever_the_checks_before_it_did(tmp_path: Path):
    scenarios: list[Scenario] = []
    for number, attack in enumerate(ATTACKS.values()):
        scenario = hostile_scenario([("bump", {})], scenario_id=f"attacked-{number}")
        scenarios.append(scenario.model_copy(update={"checks": batch(attack)}))
    library = write_hostile_library(tmp_path / "library", scenarios)
    run_dir = tmp_path / "run"
    ran = harness_cli("run", "--envs", str(library), "--agent", "oracle", "--out", str(run_dir), timeout=300)
    assert ran.returncode in (0, 1), ran.stderr
    records = [orjson.loads(line) for line in (run_dir / "results.jsonl").read_bytes().splitlines()]
    assert sorted(r["scenario_id"] for r in records) == sorted(s.id for s in scenarios)
    for record in records:
        checks = {r["check_id"]: r["passed"] for r in record["check_results"]}
        assert checks == {"attack": True, "holds": True, "fails": False}, (record["scenario_id"], checks)


ORDINARY_USER_SCRIPT = """
import asyncio, sys
import orjson
from harness.sandbox import JailSpec
from harness.schema import Check
from tests.harness.sandbox.test_jail_checks import ATTACKS, batch

async def main():
    state = {"counter": 1, "loot": [], "flag": "honest"}
    report = {}
    async with JailSpec().pool() as pool:
        for name, attack in ATTACKS.items():
            results = await pool.run_checks(batch(attack), state, state)
            report[name] = [r.passed for r in results]
    print(orjson.dumps(report).decode())

asyncio.run(main())
"""


def test_the_checks_stay_apart_when_an_ordinary_user_runs_the_harness(tmp_path: Path):
    from tests.support.unprivileged import open_to_ordinary_user, run_as_ordinary_user

    home = tmp_path / "home"
    home.mkdir()
    open_to_ordinary_user(home)
    finished = run_as_ordinary_user([sys.executable, "-c", ORDINARY_USER_SCRIPT], home=home, cwd=REPO)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    report = orjson.loads(finished.stdout.splitlines()[-1])
    assert report == {name: [True, True, False] for name in ATTACKS}
