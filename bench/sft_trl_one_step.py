"""A published SFT config trains in TRL as it loads: one optimizer step from ``load_dataset`` alone.

1. ``harness sft --agent oracle`` rolls out reference solutions on a few seed scenarios and exports them;
2. ``harness publish sft`` pushes the export to a Hub (the Hub-compatible test server on 127.0.0.1, or the
   Hub that ``HF_ENDPOINT``/``HF_TOKEN`` name when ``--repo`` is given with ``--real-hub``);
3. a fresh process calls ``datasets.load_dataset(repo, "messages", split="train")`` and hands the result,
   untouched, to ``trl.SFTTrainer`` with a tiny randomly initialised Qwen2 model and a byte-level tokenizer
   with a ChatML template that renders tools and tool calls (no weights are downloaded), for one step.

    python bench/sft_trl_one_step.py [--scenarios 4] [--repo bench/sft-demo]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_benchDummyToken"

CHAT_TEMPLATE = """\
{%- if messages[0].role == 'system' or tools %}<|im_start|>system
{%- if messages[0].role == 'system' %}
{{ messages[0].content }}{% endif %}
{%- if tools %}
# Tools
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}{% endif %}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- elif message.role == 'assistant' %}<|im_start|>assistant
{%- if message.content %}
{{ message.content }}{% endif %}
{%- for call in message.tool_calls or [] %}
<tool_call>{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments }}}</tool_call>
{%- endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def byte_level_tokenizer() -> Any:
    """A tokenizer made here: every byte is a token, plus ChatML's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(alphabet))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def train_one_step(repo: str, workdir: Path) -> dict[str, Any]:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl import SFTConfig, SFTTrainer
    from trl.data_utils import is_conversational

    hf_datasets = importlib.import_module("datasets")
    started = time.perf_counter()
    dataset = hf_datasets.load_dataset(repo, "messages", split="train")
    loaded = time.perf_counter() - started
    tokenizer = byte_level_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config)
    args = SFTConfig(
        output_dir=str(workdir / "trainer"),
        max_steps=1,
        per_device_train_batch_size=2,
        max_length=4096,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        fp16=False,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    first = trainer.train_dataset[0]
    started = time.perf_counter()
    output = trainer.train()
    return {
        "rows": len(dataset),
        "columns": dataset.column_names,
        "is_conversational": is_conversational(dataset[0]),
        "tool_calls_in_first_row": sum(len(m["tool_calls"] or []) for m in dataset[0]["messages"]),
        "first_row_tokens_after_chat_template": len(first["input_ids"]),
        "first_row_tokens_recorded_by_harness": dataset[0]["tokens"],
        "model_parameters": sum(p.numel() for p in model.parameters()),
        "global_step": output.global_step,
        "training_loss": round(float(output.training_loss), 4),
        "load_dataset_seconds": round(loaded, 2),
        "train_seconds": round(time.perf_counter() - started, 2),
    }


def hub_environment(url: str, workdir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HF_ENDPOINT": url,
        "HF_HUB_DISABLE_XET": "1",
        "HF_TOKEN": TOKEN,
        "HF_HOME": str(workdir / "hf_home"),
        "HF_DATASETS_CACHE": str(workdir / "hf_datasets"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "PYTHONPATH": str(ROOT),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }


def harness(args: list[str], env: dict[str, str]) -> None:
    command = [sys.executable, "-c", "from harness.cli import main; main()", *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False, cwd=ROOT)
    if result.returncode != 0:
        raise SystemExit(f"harness {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    print(f"$ harness {' '.join(args)}\n{result.stdout.strip()}\n", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scenarios", type=int, default=4)
    parser.add_argument("--repo", default="bench/sft-demo")
    parser.add_argument("--real-hub", action="store_true", help="Publish to the Hub of HF_ENDPOINT/HF_TOKEN.")
    parser.add_argument("--train", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train:
        with tempfile.TemporaryDirectory(prefix="sft-trl-") as tmp:
            print(json.dumps(train_one_step(args.train, Path(tmp)), indent=2))
        return

    with tempfile.TemporaryDirectory(prefix="sft-trl-") as tmp:
        workdir = Path(tmp)
        server = None
        if args.real_hub:
            env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        else:
            server = subprocess.Popen(
                [sys.executable, "-m", "tests.doubles.hub_server", "--root", str(workdir / "server"), "--token", TOKEN],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            assert server.stdout is not None
            env = hub_environment(server.stdout.readline().strip(), workdir)
        try:
            out = workdir / "sft"
            harness(
                ["sft", "--teacher", "oracle", "--agent", "oracle", "--mode", "nonconv", "--attempts", "1",
                 "--limit", str(args.scenarios), "--out", str(out)],
                env,
            )  # fmt: skip
            harness(["publish", "sft", str(out), "--repo", args.repo], env)
            trained = subprocess.run(
                [sys.executable, __file__, "--train", args.repo], env=env, text=True, capture_output=True, check=False
            )
            if trained.returncode != 0:
                raise SystemExit(f"training failed:\n{trained.stderr[-4000:]}")
            print(f"$ load_dataset({args.repo!r}, 'messages') → SFTTrainer, one step\n{trained.stdout.strip()}")
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)


if __name__ == "__main__":
    main()
