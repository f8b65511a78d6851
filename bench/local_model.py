"""Speed of the embedded local model: time to first load, prompt tokens/s, generation tokens/s.

Run: python bench/local_model.py [--threads N] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from harness.llm.local import LocalModel, default_thread_count, ensure_model_file

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order by its id.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_order",
            "description": "Cancel an order that has not shipped.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}},
                "required": ["order_id", "reason"],
            },
        },
    },
]


def long_conversation(turns: int) -> list[dict[str, Any]]:
    """A fresh (never cached) conversation of about ``turns`` tool rounds."""
    nonce = uuid.uuid4().hex
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"Session {nonce}. You are the support agent of an online shop."},
        {"role": "user", "content": "Please cancel order O-7, I ordered the wrong size."},
    ]
    for index in range(turns):
        call = {
            "id": f"call_{index}",
            "type": "function",
            "function": {"name": "get_order", "arguments": json.dumps({"order_id": f"O-{index}"})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        result = {"order_id": f"O-{index}", "status": "processing", "items": ["shirt", "socks"] * 5}
        messages.append({"role": "tool", "tool_call_id": f"call_{index}", "content": json.dumps(result)})
    return messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=default_thread_count())
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        ensure_model_file(Path(scratch))
        assemble_seconds = time.perf_counter() - started

    started = time.perf_counter()
    model_path = ensure_model_file()
    model = LocalModel(model_path, n_threads=args.threads)
    first = model.complete(long_conversation(0), TOOLS, temperature=0.0, seed=0, max_tokens=64)
    first_reply_seconds = time.perf_counter() - started

    prompt_rates: list[float] = []
    tool_call_rates: list[float] = []
    text_rates: list[float] = []
    evaluated: list[int] = []
    for repeat in range(args.repeats):
        completion = model.complete(long_conversation(12), TOOLS, temperature=0.7, seed=repeat, max_tokens=128)
        prompt_rates.append(completion.evaluated_prompt_tokens / completion.prompt_seconds)
        evaluated.append(completion.evaluated_prompt_tokens)
        if completion.completion_tokens:
            tool_call_rates.append(completion.completion_tokens / completion.generation_seconds)
        text = model.complete(
            [{"role": "user", "content": f"({uuid.uuid4().hex}) Tell me a long story about the sea."}],
            None,
            temperature=0.7,
            seed=repeat,
            max_tokens=128,
        )
        if text.completion_tokens:
            text_rates.append(text.completion_tokens / text.generation_seconds)
    model.close()

    print(f"threads: {args.threads}, GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}")
    print(f"assembling the model file (fresh folder): {assemble_seconds:.2f} s")
    print(f"model load (file already assembled): {model.load_seconds:.2f} s")
    print(
        f"time to first load and first reply (file check, load, grammar, ~{first.prompt_tokens}-token prompt): "
        f"{first_reply_seconds:.2f} s ({first.finish_reason})"
    )
    print(f"prompt: {statistics.median(prompt_rates):.0f} tokens/s (median, ~{statistics.median(evaluated)} tokens)")
    if tool_call_rates:
        print(f"generation, tool-call grammar: {statistics.median(tool_call_rates):.0f} tokens/s (median)")
    if text_rates:
        print(f"generation, text-reply grammar: {statistics.median(text_rates):.0f} tokens/s (median)")


if __name__ == "__main__":
    main()
