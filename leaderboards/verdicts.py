"""What a check's result means on a page: passed, failed, or not evaluated because its gate does not hold.

A guard check ("nothing else changed") passes only once the change it guards is made, so that doing nothing
earns nothing. The library says so in the guard's description ("... Counted only once 'order_cancelled'
holds."). When that gate fails, the guard's failure is not a second mistake: pages show it as not evaluated.
Scores are unchanged; this is presentation only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from harness.schema import CheckResult

_GATE = re.compile(r"Counted only once '([^']+)' holds")


def gate_of(description: str) -> str | None:
    """The id of the check a guard check is gated on, read from its description, or None."""
    found = _GATE.search(description)
    return found.group(1) if found else None


def closed_gates(results: Sequence[CheckResult], descriptions: Mapping[str, str]) -> dict[str, str]:
    """Failed guard checks whose gate failed too, each with the id of that gate."""
    passed = {result.check_id: result.passed for result in results}
    closed = {}
    for result in results:
        gate = gate_of(descriptions.get(result.check_id, ""))
        if not result.passed and gate is not None and passed.get(gate) is False:
            closed[result.check_id] = gate
    return closed
