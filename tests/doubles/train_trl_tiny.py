"""A tiny causal LM and tokenizer built offline, with the Qwen3 chat template TRL parses tool calls from.

The tokenizer is byte-level BPE trained on the library's own text (so prompts stay short and every text
round-trips exactly); the model is a randomly initialised two-layer Qwen3. Nothing is downloaded.
"""

from __future__ import annotations

import json
from typing import Any

from harness.library import Library

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKUP = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


def _corpus(library: Library) -> list[str]:
    texts: list[str] = []
    for environment in library.environments.values():
        texts.append(environment.code)
        texts.append(json.dumps([tool.model_dump(mode="json") for tool in environment.tools]))
    for scenario in library.scenarios:
        texts.append(scenario.task)
        texts.append(json.dumps(scenario.initial_state))
    return texts


def tiny_tokenizer(library: Library, vocab_size: int = 2000, chat_template: str | None = None) -> Any:
    """``chat_template`` defaults to TRL's Qwen3 template (TRL parses tool calls with it)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(library), trainer=trainer)
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in MARKUP])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    if chat_template is None:
        from trl.chat_template_utils import qwen3_chat_template

        chat_template = qwen3_chat_template
    fast.chat_template = chat_template
    return fast


def tiny_model(tokenizer: Any, seed: int = 0) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=16384,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    return AutoModelForCausalLM.from_config(config)
