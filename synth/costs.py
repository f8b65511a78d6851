"""Token and dollar accounting for environment synthesis: per stage, per environment, with a price table.

Dollars are computed from token counts with a fixed price table (USD per million tokens), so that runs on
scripted, local or differently priced models can be compared with published figures: the skeleton paper whose
pipeline ``harness synth envs`` implements reports $1.02 per environment built with GPT-4.1 (README, "Synthesis",
cites it). ``billed_usd`` is what the model access layer reported as spent.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from harness.schema import Usage

STAGES = ("discovery", "planning", "modeling", "assessment", "repair")

PRICE_TABLE: dict[str, tuple[float, float]] = {
    # model: (input, output) USD per 1M tokens, list prices
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
}
DEFAULT_PRICE_MODEL = "gpt-4.1"
PUBLISHED_USD_PER_ENVIRONMENT = 1.02
"""The skeleton paper's published cost of one environment (GPT-4.1)."""


class UnknownPriceModel(ValueError):
    pass


def price_for(model: str) -> tuple[float, float]:
    try:
        return PRICE_TABLE[model]
    except KeyError:
        raise UnknownPriceModel(f"no price for {model!r}; known: {', '.join(sorted(PRICE_TABLE))}") from None


def dollars(usage: Usage, price_model: str = DEFAULT_PRICE_MODEL) -> float:
    input_price, output_price = price_for(price_model)
    return (usage.prompt_tokens * input_price + usage.completion_tokens * output_price) / 1_000_000


class StageCost(BaseModel):
    stage: str
    requests: int
    cached_requests: int
    prompt_tokens: int
    completion_tokens: int
    usd: float = Field(description="At the price table's rates.")
    billed_usd: float = Field(description="As reported by the model access layer.")


class EnvironmentCost(BaseModel):
    environment_id: str
    prompt_tokens: int
    completion_tokens: int
    usd: float
    by_stage: dict[str, float]


class CostReport(BaseModel):
    price_model: str
    price_per_million: tuple[float, float]
    stages: list[StageCost]
    total: StageCost
    accepted: int
    environments: list[EnvironmentCost]
    usd_per_accepted: float | None = Field(description="Whole run's spend divided by accepted environments.")
    reference_usd_per_environment: float = PUBLISHED_USD_PER_ENVIRONMENT


def stage_cost(stage: str, usage: Usage, price_model: str) -> StageCost:
    return StageCost(
        stage=stage,
        requests=usage.requests,
        cached_requests=usage.cached_requests,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        usd=round(dollars(usage, price_model), 6),
        billed_usd=round(usage.cost_usd, 6),
    )


def build_cost_report(
    by_stage: dict[str, Usage],
    accepted: dict[str, dict[str, Usage]],
    price_model: str = DEFAULT_PRICE_MODEL,
) -> CostReport:
    """``by_stage``: everything spent per stage. ``accepted``: per accepted environment, its own spend per stage
    (discovery is shared, so an environment's share of it is the tasks that motivated it)."""
    stages = [stage_cost(stage, by_stage.get(stage, Usage()), price_model) for stage in STAGES]
    total_usage = Usage()
    for usage in by_stage.values():
        total_usage.add(usage)
    environments = []
    for env_id, usages in sorted(accepted.items()):
        combined = Usage()
        for usage in usages.values():
            combined.add(usage)
        environments.append(
            EnvironmentCost(
                environment_id=env_id,
                prompt_tokens=combined.prompt_tokens,
                completion_tokens=combined.completion_tokens,
                usd=round(dollars(combined, price_model), 6),
                by_stage={stage: round(dollars(u, price_model), 6) for stage, u in usages.items()},
            )
        )
    total = stage_cost("total", total_usage, price_model)
    return CostReport(
        price_model=price_model,
        price_per_million=price_for(price_model),
        stages=stages,
        total=total,
        accepted=len(accepted),
        environments=environments,
        usd_per_accepted=round(total.usd / len(accepted), 6) if accepted else None,
    )
