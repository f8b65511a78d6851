"""Model access: the only package that imports litellm.

```python
from harness.llm import LLMClient, ModelSettings
client = LLMClient(cache_dir=None, default_limits=EndpointLimits(concurrency=64))
result = await client.chat(ModelSettings(model="qwen3-8b", temperature=0.0), messages, tools=tools, role="agent")
```
"""

import importlib
from typing import TYPE_CHECKING, Any

from harness.llm import litellm_setup  # noqa: F401  (first: sets the offline cost map before litellm loads)
from harness.llm.aliases import AliasTable, ResolvedModel, env_name, user_models_file
from harness.llm.cache import ResponseCache, cache_key
from harness.llm.client import ChatResult, LLMClient
from harness.llm.errors import (
    ContextWindowExceeded,
    EndpointUnreachable,
    LLMError,
    ModelHandlerError,
    RequestRejected,
    RetriesExhausted,
)
from harness.llm.limits import EndpointLimits
from harness.llm.local_provider import LOCAL_MODEL_STRING, LOCAL_PROVIDER
from harness.llm.python_models import (
    PYTHON_PROVIDER,
    PythonModelHandler,
    register_python_model,
    registered_python_models,
    unregister_python_model,
)
from harness.llm.retry import RetryPolicy
from harness.schema import ModelSettings

if TYPE_CHECKING:
    from harness.llm.local import (
        LocalCompletion,
        LocalContextWindowExceeded,
        LocalModel,
        LocalModelUnavailable,
        get_local_model,
    )

# The embedded model's module is loaded on first use of one of its names, not with every model client.
_LOCAL_EXPORTS = frozenset(
    {"LocalCompletion", "LocalContextWindowExceeded", "LocalModel", "LocalModelUnavailable", "get_local_model"}
)

__all__ = [
    "LOCAL_MODEL_STRING",
    "LOCAL_PROVIDER",
    "PYTHON_PROVIDER",
    "AliasTable",
    "ChatResult",
    "ContextWindowExceeded",
    "EndpointLimits",
    "EndpointUnreachable",
    "LLMClient",
    "LLMError",
    "LocalCompletion",
    "LocalContextWindowExceeded",
    "LocalModel",
    "LocalModelUnavailable",
    "ModelHandlerError",
    "ModelSettings",
    "PythonModelHandler",
    "RequestRejected",
    "ResolvedModel",
    "ResponseCache",
    "RetriesExhausted",
    "RetryPolicy",
    "cache_key",
    "env_name",
    "get_local_model",
    "register_python_model",
    "registered_python_models",
    "unregister_python_model",
    "user_models_file",
]


def __getattr__(name: str) -> Any:
    if name in _LOCAL_EXPORTS:
        return getattr(importlib.import_module("harness.llm.local"), name)
    raise AttributeError(f"module 'harness.llm' has no attribute {name!r}")
