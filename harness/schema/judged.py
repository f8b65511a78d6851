"""What an episode stores of an LLM judge (what a scenario asks one is :class:`harness.schema.library.JudgedCheck`):
every request, reply and the verdicts read from it (:class:`JudgeRecord`), so that a verdict can be shown, replayed
without the judge, or judged again by another."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.schema.library import JSONValue, Record

JUDGE_RECORD_VERSION = "1"
"""The version of :class:`JudgeRecord`'s layout (``Trajectory.judge``); records carry it."""


class JudgeVerdict(Record):
    """One item of a judge's reply, as the benchmark's evaluator reads it."""

    item: str = Field(description="What was judged (an assertion, a rubric item), as the reply names it.")
    holds: bool
    reason: str | None = None


class JudgeExchange(Record):
    """One request to the judge for one judged check, its reply and the verdicts read from it."""

    check_id: str
    kind: str
    request: list[dict[str, JSONValue]] = Field(description="The messages sent to the judge.")
    reply: str | None = Field(default=None, description="The judge's reply text; None when it gave none.")
    verdicts: list[JudgeVerdict] = Field(default_factory=list)
    unreadable: str | None = Field(
        default=None, description="Why the reply could not be read, when the benchmark's evaluator cannot read it."
    )
    model: str | None = Field(default=None, description="The provider model that answered.")
    cached: bool = False
    replayed: bool = Field(default=False, description="The reply was the stored one (`harness rescore`), not asked.")


class JudgeRecord(Record):
    """Everything an episode's verdict took from the judge: the judge's settings and one exchange per judged
    check. Stored on the trajectory (``Trajectory.judge``)."""

    version: Literal["1"] = "1"
    judge_model: str | None = Field(
        default=None, description="The judge's model alias (None when every verdict was replayed from a record)."
    )
    settings: dict[str, JSONValue] = Field(default_factory=dict, description="The judge's sampling parameters.")
    exchanges: list[JudgeExchange] = Field(default_factory=list)

    def exchange(self, check_id: str) -> JudgeExchange | None:
        return next((e for e in self.exchanges if e.check_id == check_id), None)
