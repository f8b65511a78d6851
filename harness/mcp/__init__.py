"""Environments over the Model Context Protocol: serve any environment with one sandboxed instance per MCP
session (:mod:`harness.mcp.server`), behind one door for every HTTP server (:mod:`harness.mcp.access`, with its
credential: :mod:`harness.mcp.credential`), and evaluate agents on environments served over MCP
(:mod:`harness.mcp.client`, :mod:`harness.mcp.evaluation`).

Names are loaded lazily: fastmcp is needed only when they are used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.mcp.access import DEFAULT_MAX_REQUEST_BYTES as DEFAULT_MAX_REQUEST_BYTES
    from harness.mcp.access import AccessError as AccessError
    from harness.mcp.access import AccessGuard as AccessGuard
    from harness.mcp.access import AccessPolicy as AccessPolicy
    from harness.mcp.admin import ADMIN_EXTENSION as ADMIN_EXTENSION
    from harness.mcp.client import McpAdminError as McpAdminError
    from harness.mcp.client import McpConnectionError as McpConnectionError
    from harness.mcp.client import McpTarget as McpTarget
    from harness.mcp.client import McpToolSession as McpToolSession
    from harness.mcp.credential import TOKEN_VARIABLE as TOKEN_VARIABLE
    from harness.mcp.credential import CredentialError as CredentialError
    from harness.mcp.credential import make_token as make_token
    from harness.mcp.credential import public_url as public_url
    from harness.mcp.evaluation import EnvironmentMismatch as EnvironmentMismatch
    from harness.mcp.evaluation import McpEpisode as McpEpisode
    from harness.mcp.evaluation import check_served_environment as check_served_environment
    from harness.mcp.evaluation import run_mcp_episode as run_mcp_episode
    from harness.mcp.server import EnvironmentServer as EnvironmentServer
    from harness.mcp.server import running_http_server as running_http_server
    from harness.mcp.server import server_instructions as server_instructions
    from harness.mcp.sessions import SessionExpired as SessionExpired
    from harness.mcp.sessions import SessionLimitReached as SessionLimitReached
    from harness.mcp.sessions import SessionRegistry as SessionRegistry

_EXPORTS = {
    "AccessError": "harness.mcp.access",
    "AccessGuard": "harness.mcp.access",
    "AccessPolicy": "harness.mcp.access",
    "CredentialError": "harness.mcp.credential",
    "DEFAULT_MAX_REQUEST_BYTES": "harness.mcp.access",
    "SessionLimitReached": "harness.mcp.sessions",
    "TOKEN_VARIABLE": "harness.mcp.credential",
    "make_token": "harness.mcp.credential",
    "public_url": "harness.mcp.credential",
    "ADMIN_EXTENSION": "harness.mcp.admin",
    "EnvironmentMismatch": "harness.mcp.evaluation",
    "EnvironmentServer": "harness.mcp.server",
    "McpAdminError": "harness.mcp.client",
    "McpConnectionError": "harness.mcp.client",
    "McpEpisode": "harness.mcp.evaluation",
    "McpTarget": "harness.mcp.client",
    "McpToolSession": "harness.mcp.client",
    "SessionExpired": "harness.mcp.sessions",
    "SessionRegistry": "harness.mcp.sessions",
    "check_served_environment": "harness.mcp.evaluation",
    "run_mcp_episode": "harness.mcp.evaluation",
    "running_http_server": "harness.mcp.server",
    "server_instructions": "harness.mcp.server",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'harness.mcp' has no attribute {name!r}")
    return getattr(importlib.import_module(module_name), name)
