"""The checks of τ²'s reward bases that need more than one database (``tau2/evaluator/``): the DB check over the
agent's and the user's databases, and action matching.

Each is an ordinary :class:`~harness.schema.Check` that runs in the check process, never in the environment's:

* ``DB`` (``evaluator_env.py``): the hash of the agent's database and the hash of the user's database both equal
  those the gold actions reach (upstream compares the two hashes of a fresh environment replayed with the gold).
  The hash is :func:`db_digest`, not upstream's text: the same verdict, six times faster.
* ``ACTION`` (``evaluator_action.py``, ``data_model/tasks.py`` ``Action.compare_with_tool_call``): each gold action
  is matched by some tool call of the episode, the agent's or the user's: same name and, over the arguments it
  compares (``compare_args``, or when that is unset every argument of the call), equal values.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson

from harness.schema import Check

DB_CHECK_ID = "tau2-db"
ENV_ASSERTIONS_CHECK_ID = "tau2-env-assertions"
ACTION_CHECK_PREFIX = "tau2-action-"


DB_DIGEST = "hashlib.sha256(orjson.dumps(db, option=orjson.OPT_SORT_KEYS)).hexdigest()"
"""The expression the DB checks compute for a database ``db`` (:func:`db_digest`)."""


def db_digest(db: Any) -> str:
    """What the DB checks compare: sha256 of the database's JSON with sorted keys, as orjson writes it.

    Upstream's ``get_dict_hash`` hashes ``json.dumps(db, sort_keys=True, default=str)``. Both texts are one-to-one
    encodings of a JSON value (``1`` and ``1.0`` stay apart in both), so two databases have equal digests exactly
    when upstream's hashes are equal, and the verdict is upstream's. With orjson's, the digest of retail's 1.2 MB
    database takes 2.5 ms instead of 16, and the check runs on every episode."""
    return hashlib.sha256(orjson.dumps(db, option=orjson.OPT_SORT_KEYS)).hexdigest()


def state_hash(databases: list[Any]) -> str:
    """The digests of the databases (:func:`db_digest` of each), joined."""
    return ",".join(db_digest(db) for db in databases)


def dual_db_check(expected: str) -> Check:
    source = (
        "import hashlib\n\nimport orjson\n\n\n"
        "def check(initial, final):\n"
        "    parts = []\n"
        "    for db in (final['tools']['db'], final['user_tools']['db']):\n"
        f"        parts.append({DB_DIGEST})\n"
        f"    return ','.join(parts) == {expected!r}\n"
    )
    return Check(
        id=DB_CHECK_ID,
        description="The agent's database and the user's both equal those the task's gold actions reach "
        "(τ²'s DB check).",
        source=source,
    )


def env_assertions_check(domain_code: str, assertions: list[dict[str, Any]]) -> Check:
    """``domain_code`` defines ``load_telecom_state(state)`` (``TelecomCode.check_code``). Every assertion is run,
    in order, as upstream's evaluator does; when one does not hold the check returns the list of which did
    (:data:`ENV_ASSERTIONS_CHECK_ID`'s value, read back by the export)."""
    calls = [
        {
            "env_type": a.get("env_type", "assistant"),
            "func_name": a["func_name"],
            "arguments": a.get("arguments") or {},
            "assert_value": a.get("assert_value", True),
        }
        for a in assertions
    ]
    source = (
        domain_code
        + "\n\nASSERTIONS = json.loads("
        + repr(json.dumps(calls))
        + ")\n\n\n"
        + "def check(initial, final):\n"
        + "    env = load_telecom_state(final)\n"
        + "    met = []\n"
        + "    for assertion in ASSERTIONS:\n"
        + "        result = env.run_env_function_call(assertion)\n"
        + "        if not isinstance(result, bool):\n"
        + "            raise ValueError(f\"{assertion['func_name']} returned {type(result).__name__}, not bool\")\n"
        + "        met.append(result == assertion['assert_value'])\n"
        + "    return True if all(met) else met\n"
    )
    names = ", ".join(f"{c['func_name']}={c['assert_value']}" for c in calls)
    return Check(
        id=ENV_ASSERTIONS_CHECK_ID,
        description=f"Upstream's environment assertions hold on the final state ({names}).",
        source=source,
    )


def action_check(index: int, action: dict[str, Any]) -> Check:
    name = str(action["name"])
    arguments = action.get("arguments") or {}
    compare = action.get("compare_args")
    source = (
        "import json\n\n\n"
        "def check(initial, final, transcript):\n"
        f"    name, wanted, compare = {name!r}, json.loads({json.dumps(arguments)!r}), "
        f"json.loads({json.dumps(compare)!r})\n"
        "    for message in transcript:\n"
        "        if message.get('role') not in ('assistant', 'user'):\n"
        "            continue\n"
        "        for call in message.get('tool_calls') or []:\n"
        "            function = call.get('function') or {}\n"
        "            if function.get('name') != name:\n"
        "                continue\n"
        "            try:\n"
        "                given = json.loads(function.get('arguments') or '{}')\n"
        "            except ValueError:\n"
        "                continue\n"
        "            if not isinstance(given, dict):\n"
        "                continue\n"
        "            keys = list(given) if compare is None else compare\n"
        "            if not keys:\n"
        "                return True\n"
        "            mine = {k: v for k, v in given.items() if k in keys}\n"
        "            if mine == {k: v for k, v in wanted.items() if k in keys}:\n"
        "                return True\n"
        "    return False\n"
    )
    shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items() if compare is None or k in compare)
    who = action.get("requestor", "assistant")
    return Check(
        id=f"{ACTION_CHECK_PREFIX}{index}",
        description=f"The {who} called {name}({shown}) (τ²'s action check).",
        source=source,
    )
