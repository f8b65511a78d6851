"""What every model-backed agent holds: its model settings, the client, its role, and its record settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from harness.schema import AgentSettings, ModelSettings

if TYPE_CHECKING:
    from harness.llm import LLMClient


class ModelAgent:
    kind: ClassVar[str]

    def __init__(
        self,
        settings: ModelSettings,
        client: LLMClient,
        *,
        role: str = "agent",
        system_prompt_version: str = "1",
    ) -> None:
        self.model_settings = settings
        self.client = client
        self.role = role
        self.settings = AgentSettings(
            kind=self.kind, role=role, model=settings, system_prompt_version=system_prompt_version
        )
