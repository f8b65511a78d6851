"""Opt-in on-disk response cache.

The key is a SHA-256 of everything that changes the answer: the provider model string, the api_base, the
messages, the tools and every request parameter (temperature, seed, max_tokens, extra_body, ...), serialized
with sorted keys. Credentials are never part of it. Each entry is one JSON file, written to a temporary file
and renamed into place, so concurrent writers and readers never see a partial entry (the last writer of a
key wins, and all writers of one key write the same answer). File I/O runs in worker threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

logger = logging.getLogger(__name__)

CACHE_FORMAT = 1


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot key the response cache on a {type(value).__name__}")


def cache_key(
    *,
    provider_model: str,
    api_base: str | None,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    params: dict[str, Any],
) -> str:
    payload = {
        "format": CACHE_FORMAT,
        "model": provider_model,
        "api_base": api_base,
        "messages": messages,
        "tools": tools,
        "params": params,
    }
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS, default=_default)).hexdigest()


class ResponseCache:
    """A folder of ``<key[:2]>/<key>.json`` entries."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def read(self, key: str) -> dict[str, Any] | None:
        path = self.path(key)
        try:
            data = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, orjson.JSONDecodeError) as exc:
            logger.warning("ignoring unreadable cache entry %s: %s", path, exc)
            return None
        return data if isinstance(data, dict) and "message" in data else None

    def write(self, key: str, entry: dict[str, Any]) -> None:
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(orjson.dumps(entry))
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    async def get(self, key: str) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.read, key)

    async def put(self, key: str, entry: dict[str, Any]) -> None:
        try:
            await asyncio.to_thread(self.write, key, entry)
        except OSError as exc:  # a full disk must not fail the call whose answer we already have
            logger.warning("could not write cache entry %s: %s", key, exc)
