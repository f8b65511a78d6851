"""Raw MCP requests, as an attacker (or a browser page) would send them: one 2026-07-28 (sessionless) ``tools/call``
that needs no handshake, and the handshake-era ``initialize``."""

from __future__ import annotations

import json
from typing import Any

from mcp.shared.inbound import (
    CLIENT_CAPABILITIES_META_KEY,
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    PROTOCOL_VERSION_META_KEY,
)

from harness.mcp.admin import SESSION_META_KEY

MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
PHONE_TOOL = "update_contact_phone"
"""A tool of ``airline_reservations`` that changes the state: what an intruder's call would leave behind."""
INTRUDER_PHONE = "+1-666-666-6666"


def modern_call(
    name: str, arguments: dict[str, Any], session_key: str, request_id: int = 1
) -> tuple[dict[str, str], bytes]:
    """Headers and body of one sessionless ``tools/call`` in the session ``session_key`` (the request ``_meta``
    key), complete enough that the server runs it."""
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {
                PROTOCOL_VERSION_META_KEY: MODERN,
                CLIENT_CAPABILITIES_META_KEY: {},
                SESSION_META_KEY: session_key,
            },
        },
    }
    headers = {
        "content-type": "application/json",
        "accept": ACCEPT,
        MCP_PROTOCOL_VERSION_HEADER: MODERN,
        MCP_METHOD_HEADER: "tools/call",
        MCP_NAME_HEADER: name,
    }
    return headers, json.dumps(body).encode()


def intruder_call(session_key: str = "intruder") -> tuple[dict[str, str], bytes]:
    """The call an intruder makes: change customer C-101's phone in the session ``session_key``."""
    return modern_call(PHONE_TOOL, {"customer_id": "C-101", "phone": INTRUDER_PHONE}, session_key)


def initialize_body(request_id: int = 1) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "x", "version": "1"},
            },
        }
    ).encode()


def result_of(text: str) -> dict[str, Any]:
    """The JSON-RPC message of a response body, plain JSON or one server-sent event."""
    for line in text.splitlines():
        if line.startswith("data:"):
            message: dict[str, Any] = json.loads(line[5:])
            return message
    message = json.loads(text)
    return message
