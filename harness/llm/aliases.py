"""Model aliases: short names mapped to a litellm model string, an endpoint and default parameters.

Sources, later ones winning: the bundled ``harness/data/models.toml``, the user file (``$HARNESS_MODELS_FILE``,
else ``$XDG_CONFIG_HOME/harness/models.toml``, else ``~/.config/harness/models.toml``), and environment
variables overriding an alias's api_base: ``HARNESS_MODEL_<ALIAS>_API_BASE`` or ``HARNESS_API_BASE_<ALIAS>``.
A model string that is not an alias passes to litellm unchanged.
"""

from __future__ import annotations

import copy
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

BUNDLED_FILE = Path(__file__).resolve().parent.parent / "data" / "models.toml"


class ResolvedModel(BaseModel):
    """What a model string means. ``alias`` is None when the string passed through unchanged."""

    model_config = ConfigDict(frozen=True)

    alias: str | None
    provider_model: str
    api_base: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    api_key_env: str | None = Field(default=None, description="Name of the environment variable with the key.")
    serve_hint: str | None = Field(default=None, description="How to start the endpoint.")
    max_episodes: int | None = Field(
        default=None, description="Episodes worth running at once on this model (None: no model-side bound)."
    )
    usd_per_million_tokens: tuple[float, float] | None = Field(
        default=None,
        description="(input, output) price set by the alias; None: litellm's cost map decides, or it is unpriced.",
    )

    @property
    def provider(self) -> str:
        """The litellm provider prefix (``hosted_vllm``, ``openai``, ...), or "" when the string has none."""
        return self.provider_model.split("/", 1)[0] if "/" in self.provider_model else ""

    @property
    def endpoint(self) -> str:
        """What limits are kept per: the api_base when there is one, else the provider."""
        return self.api_base or self.provider or self.provider_model


class AliasEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    serve: str | None = None
    same_server_as: str | None = None
    max_episodes: int | None = Field(default=None, ge=1)
    description: str = ""
    input_usd_per_million: float | None = Field(
        default=None, ge=0, description="Price of a million prompt tokens (overrides litellm's cost map)."
    )
    output_usd_per_million: float | None = Field(
        default=None, ge=0, description="Price of a million completion tokens (overrides litellm's cost map)."
    )

    @model_validator(mode="after")
    def _both_prices_or_none(self) -> AliasEntry:
        if (self.input_usd_per_million is None) != (self.output_usd_per_million is None):
            raise ValueError("set both input_usd_per_million and output_usd_per_million, or neither")
        return self


def env_name(alias: str) -> str:
    """``qwen3-8b`` → ``QWEN3_8B``: the alias as it appears in environment variable names."""
    return re.sub(r"[^A-Za-z0-9]", "_", alias).upper()


def user_models_file() -> Path:
    explicit = os.environ.get("HARNESS_MODELS_FILE")
    if explicit:
        return Path(explicit).expanduser()
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "harness" / "models.toml"


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _read_aliases(text: str, origin: str) -> dict[str, dict[str, Any]]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{origin}: not valid TOML: {exc}") from exc
    aliases = data.get("aliases", {})
    if not isinstance(aliases, dict) or not all(isinstance(v, dict) for v in aliases.values()):
        raise ValueError(f"{origin}: expected [aliases.<name>] tables")
    return aliases


class AliasTable:
    """The merged alias table. Environment variables are read when the table is built."""

    def __init__(self, entries: Mapping[str, AliasEntry], environ: Mapping[str, str] | None = None) -> None:
        self.entries = dict(entries)
        self._environ = dict(os.environ if environ is None else environ)

    @classmethod
    def load(
        cls,
        *,
        user_file: str | Path | None = None,
        include_user_file: bool = True,
        environ: Mapping[str, str] | None = None,
    ) -> AliasTable:
        raw = _read_aliases(BUNDLED_FILE.read_text("utf-8"), str(BUNDLED_FILE))
        path = Path(user_file) if user_file is not None else (user_models_file() if include_user_file else None)
        if path is not None and path.is_file():
            for name, fields in _read_aliases(path.read_text("utf-8"), str(path)).items():
                raw[name] = deep_merge(raw.get(name, {}), fields)
        entries = {}
        for name, fields in raw.items():
            try:
                entries[name] = AliasEntry.model_validate(fields)
            except ValueError as exc:
                raise ValueError(f"model alias {name!r}: {exc}") from exc
        return cls(entries, environ)

    @property
    def names(self) -> list[str]:
        return sorted(self.entries)

    def _api_base_override(self, alias: str) -> str | None:
        key = env_name(alias)
        for variable in (f"HARNESS_MODEL_{key}_API_BASE", f"HARNESS_API_BASE_{key}"):
            value = self._environ.get(variable)
            if value:
                return value
        return None

    def resolve(self, model: str) -> ResolvedModel:
        entry = self.entries.get(model)
        if entry is None:
            return ResolvedModel(alias=None, provider_model=model)
        api_base = self._api_base_override(model)
        if api_base is None and entry.same_server_as:
            api_base = self._api_base_override(entry.same_server_as)
        return ResolvedModel(
            alias=model,
            provider_model=entry.model,
            api_base=api_base or entry.api_base,
            params=copy.deepcopy(entry.params),
            api_key_env=entry.api_key_env,
            serve_hint=entry.serve,
            max_episodes=entry.max_episodes,
            usd_per_million_tokens=(
                (entry.input_usd_per_million, entry.output_usd_per_million)
                if entry.input_usd_per_million is not None and entry.output_usd_per_million is not None
                else None
            ),
        )
