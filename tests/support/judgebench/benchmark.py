"""``judgebench``: the test-only benchmark whose judged checks ask a judge whether claims about the conversation
hold. Its reply format and its two rules for a reply it cannot read (the check fails, or the episode has no score)
are its own, as a real benchmark's evaluator would fix them."""

from __future__ import annotations

import json
from typing import Any

from harness.episode.judging import UnreadableReply
from harness.registry import Benchmark, JudgeKind
from harness.schema import JudgedCheck, JudgeVerdict

KIND = "judgebench-claims"


class ClaimsJudge:
    """The judge kind's two pure functions."""

    def request(self, check: JudgedCheck, transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
        conversation = "\n".join(f"{m.get('role')}: {m.get('content')}" for m in transcript)
        claims = "\n".join(f"- {claim}" for claim in check.asked["claims"])
        return [
            {"role": "system", "content": check.prompts["system"]},
            {"role": "user", "content": check.prompts["user"].format(conversation=conversation, claims=claims)},
        ]

    def parse(self, check: JudgedCheck, reply: str) -> list[JudgeVerdict]:
        try:
            data = json.loads(reply)
            return [
                JudgeVerdict(item=str(item["claim"]), holds=item["holds"] is True, reason=item.get("why"))
                for item in data["verdicts"]
            ]
        except (ValueError, KeyError, TypeError) as exc:
            if check.asked.get("unreadable") == "no_score":
                raise UnreadableReply(f"not a verdicts object ({type(exc).__name__})") from None
            return [
                JudgeVerdict(item=str(claim), holds=False, reason="unreadable reply") for claim in check.asked["claims"]
            ]


CLAIMS_JUDGE = ClaimsJudge()

BENCHMARK = Benchmark(
    name="judgebench",
    title="Judge bench",
    judge_kinds=(
        JudgeKind(name=KIND, functions="tests.support.judgebench.benchmark:CLAIMS_JUDGE", help="Claims to hold."),
    ),
)
