"""What the screening before a run costs: the cheap part of `harness validate` on every seed scenario.

python bench/screening.py [--workers N] [--copies K]

``--copies`` repeats the library's scenarios under new ids to approach an imported EnvScaler release (2,550).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from harness.library import load_library
from harness.validate import invalid_scenarios


async def main(workers: int, copies: int) -> None:
    library = load_library()
    scenarios = [s.model_copy(update={"id": f"{s.id}#{k}"}) for k in range(copies) for s in library.scenarios]
    async with library.jail(workers=workers).pool() as pool:
        started = time.perf_counter()
        invalid = await invalid_scenarios(pool, library, scenarios)
        elapsed = time.perf_counter() - started
    print(
        f"screened {len(scenarios)} scenarios with {workers} workers in {elapsed:.2f} s "
        f"({elapsed / len(scenarios) * 1000:.1f} ms each); invalid: {len(invalid)}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--copies", type=int, default=1)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.workers, arguments.copies))
