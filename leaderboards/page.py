"""Shared pieces of the HTML pages: escaping, formatting, the page frame and its style sheet.

Pages are static: a Content-Security-Policy forbids scripts, remote fetches and everything but inline styles
and ``data:`` images, so text a model wrote can never run even if it slipped past escaping. The one exception
is the episode index's own sorting and filtering script, allowed by its hash alone (``html_page(script=...)``).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from typing import Any

from harness.files.outputs import safe_file_name

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
)

STYLE = """
:root { color-scheme: light; }
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px auto;
       max-width: 1280px; padding: 0 16px; color: #1f2328; background: #ffffff; line-height: 1.45; }
h1 { font-size: 1.6em; margin: 0.2em 0 0.4em; }
h2 { font-size: 1.3em; margin-top: 1.6em; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
h3 { font-size: 1.1em; margin-top: 1.2em; }
.meta { color: #57606a; font-size: 0.92em; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 0.9em; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #dbe7f7; font-weight: 600; }
tr:nth-child(even) td { background: #f6f8fa; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.plots { display: flex; flex-wrap: wrap; gap: 16px; }
.plots figure { margin: 0; border: 1px solid #d0d7de; padding: 8px; background: #fff; }
.plots img { display: block; max-width: 100%; height: auto; }
figcaption { color: #57606a; font-size: 0.85em; margin-top: 4px; }
.warning { background: #fff8c5; border: 1px solid #d4a72c; padding: 8px 12px; margin: 8px 0; }
.badge { display: inline-block; padding: 0 6px; border-radius: 10px; font-size: 0.8em; font-weight: 600;
         border: 1px solid #d0d7de; background: #f6f8fa; }
.pass { color: #1a7f37; } .fail { color: #cf222e; }
tr.failed td { background: #ffebe9; }
.message { border: 1px solid #d0d7de; border-radius: 6px; margin: 10px 0; padding: 8px 12px; }
.message.system { background: #f6f8fa; } .message.user { background: #ddf4ff; }
.message.assistant { background: #ffffff; } .message.tool { background: #fbefff; }
.role { font-weight: 700; font-size: 0.78em; color: #57606a; }
.rolename { text-transform: uppercase; }
td.model { white-space: nowrap; }
pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0; font-size: 0.88em;
      font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.call { border-left: 3px solid #8250df; padding-left: 8px; margin: 6px 0; }
.diff { font-size: 0.85em; }
"""

MAX_VALUE_CHARS = 4000


def esc(value: object) -> str:
    """HTML-escape any value as text (quotes included, so it is safe inside attributes too)."""
    return html.escape("" if value is None else str(value), quote=True)


def to_json_text(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """Pretty JSON of a value, cut to ``limit`` characters (not escaped)."""
    try:
        text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters)"
    return text


def fmt_float(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def fmt_percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def fmt_cost(value: float | None) -> str:
    if value is None:
        return "–"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def fmt_tokens(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def episode_file_name(episode_id: str) -> str:
    """A file name for an episode page that is safe whatever the episode id holds, and that no other id shares
    (an id that is not a plain name gets a short hash of itself: ``../x`` and ``_.x`` do not meet)."""
    return f"{safe_file_name(episode_id, fallback='episode')}.html"


def html_page(title: str, body: str, script: str | None = None) -> str:
    """A page; ``script`` (the page's own code, never model text) runs, allowed by its hash in the CSP."""
    policy = CONTENT_SECURITY_POLICY
    tail = ""
    if script is not None:
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        policy += f"; script-src 'sha256-{digest}'"
        tail = f"<script>{script}</script>\n"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}\n{tail}</body>\n</html>\n"
    )
