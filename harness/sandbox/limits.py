"""What one sandbox pool allows each jailed process: time, memory, and the size and shape of what it may send
back. The pool applies them, and the reply checks (:mod:`harness.sandbox.replies`) read them."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SandboxLimits(BaseModel):
    call_timeout_s: float = Field(
        default=5.0, gt=0, description="CPU seconds per tool call, and for loading a class (the process's own time)."
    )
    check_timeout_s: float = Field(default=5.0, gt=0, description="CPU seconds per check function.")
    wall_clock_factor: float = Field(
        default=10.0,
        ge=1,
        description="The wall-clock backstop: a load, a call or a check batch may take this many times its CPU-time "
        "limit, plus kill_grace_s, before its process is killed. Its expiry says the machine was too loaded (or the "
        "code waited without computing), not that the code ran too long: an infrastructure error, re-run by "
        "--retry-errors.",
    )
    memory_mb: int = Field(default=1024, ge=0, description="Address-space cap of each sandbox process; 0 for none.")
    max_result_bytes: int = Field(default=1_000_000, gt=0, description="Bytes of one tool call's result as JSON.")
    max_state_bytes: int = Field(default=64_000_000, gt=0, description="Bytes of an environment's state as JSON.")
    max_result_depth: int = Field(default=64, gt=0, description="Containers nested in one another in a result.")
    max_state_depth: int = Field(default=96, gt=0, description="Containers nested in one another in a state.")
    max_result_items: int = Field(default=100_000, gt=0, description="Keys and items of all a result's containers.")
    max_state_items: int = Field(default=2_000_000, gt=0, description="Keys and items of all a state's containers.")
    max_string_chars: int = Field(
        default=1_000_000, gt=0, description="Characters of any one string or key in a result or a state."
    )
    check_gather_s: float = Field(
        default=1.0,
        ge=0,
        description="How long, at most, a scenario's first episode to score waits for the scenario's other episodes "
        "still running (a run's trials) so that one check process scores them.",
    )
    kill_grace_s: float = Field(default=2.0, ge=0, description="How long past a timeout before the process is killed.")
    max_recoveries: int = Field(default=3, ge=0, description="Process replacements one session may go through.")
    zygote_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="How long a zygote may take to answer a fork request before it is killed and replaced.",
    )
