"""The one YAML reader for YAML from outside (dataset cards): no aliases, a size cap and a node cap.

A 1 KB card whose anchors refer to anchors ("billion laughs") expands to 10^8 strings under ``yaml.safe_load``;
aliases are refused outright (the cards the harness and ``datasets`` write never use them), so the parsed value
can only be as large as the text, which is capped.
"""

from __future__ import annotations

from typing import Any

import yaml

from harness.errors import BadInput

MAX_YAML_BYTES = 1 << 20
"""The largest YAML text read: a card's front matter is a few KB."""
MAX_YAML_NODES = 200_000
"""The most scalars, sequences and mappings one YAML text may hold."""


class YamlRefused(BadInput):
    """YAML that is too large, holds too many nodes, or uses aliases."""


class _BoundedLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise YamlRefused(f"YAML aliases are not accepted (line {event.start_mark.line + 1})")
        self.nodes += 1
        if self.nodes > MAX_YAML_NODES:
            raise YamlRefused(f"more than {MAX_YAML_NODES:,} YAML nodes")
        return super().compose_node(parent, index)


def load_yaml(text: str, name: str) -> Any:
    """The value of ``text`` (YAML read from ``name``); :class:`YamlRefused`, one line naming ``name``, when it is
    too large, has too many nodes, uses an alias or does not parse."""
    if len(text) > MAX_YAML_BYTES:
        raise YamlRefused(f"{name}: its YAML is {len(text):,} characters; the limit is {MAX_YAML_BYTES:,}")
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except YamlRefused as refused:
        raise YamlRefused(f"{name}: {refused}") from None
    except RecursionError:
        raise YamlRefused(f"{name}: the YAML nests too deeply") from None
    except yaml.YAMLError as error:
        detail = " ".join(str(error).split())[:300]
        raise YamlRefused(f"{name}: the YAML does not parse ({detail})") from None
    finally:
        loader.dispose()
