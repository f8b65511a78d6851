"""What a check's result means on a page: passed, failed, or not evaluated because its gate does not hold.

A guard check ("nothing else changed") passes only once the change it guards is made, so that doing nothing
earns nothing; its ``gate`` field names the check it waits on. When that gate fails, the guard's failure is not a
second mistake: pages show it as not evaluated. Scores are unchanged; this is presentation only.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.schema import Check, CheckResult


def closed_gates(results: Sequence[CheckResult], checks: Sequence[Check]) -> dict[str, str]:
    """Failed guard checks whose gate failed too, each with the id of that gate."""
    passed = {result.check_id: result.passed for result in results}
    gates = {check.id: check.gate for check in checks}
    closed = {}
    for result in results:
        gate = gates.get(result.check_id)
        if not result.passed and gate is not None and passed.get(gate) is False:
            closed[result.check_id] = gate
    return closed
