"""Run in the verl venv (tests/support/verl_venv.py): drive the ``harness`` agent loop with verl's own classes.

The loop is registered from the example YAML the way verl's ``AgentLoopWorker`` does and built with
``hydra.utils.instantiate`` and verl's config wrappers; ``ScriptedServer`` stands in for the LLM server with
verl's ``generate`` signature and returns scripted replies tokenized by the real (tiny, offline) tokenizer.
Reads a JSON spec (argv[1]) and writes one JSON result per case to argv[2].
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import hydra
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from harness.library import Library, load_library
from harness.train.verl_agent_loop import HarnessAgentLoop, close_shared_jails


class ScriptedServer:
    """verl's ``LLMServerClient.generate`` signature; each call returns the next scripted reply's token ids."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.inputs: list[list[int]] = []
        self.max_tokens: list[Any] = []

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Any] | None = None,
        video_data: list[Any] | None = None,
        audio_data: list[Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        self.inputs.append(list(prompt_ids))
        self.max_tokens.append(sampling_params.get("max_tokens"))
        text = self.replies.pop(0) if self.replies else "Nothing more.<|im_end|>"
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed")


def crashing_library(library: Library) -> Library:
    banking = library.environments["banking"]
    code = banking.code.replace(
        "def __init__(self, init_config: dict):", "def __init__(self, init_config: dict):\n        raise SystemExit(3)"
    )
    assert code != banking.code
    return replace(library, environments={**library.environments, "banking": banking.model_copy(update={"code": code})})


def spans(tokenizer: Any, ids: list[int], mask: list[int]) -> list[list[Any]]:
    found: list[list[Any]] = []
    start = 0
    for index in range(1, len(mask) + 1):
        if index == len(mask) or mask[index] != mask[start]:
            found.append([mask[start], tokenizer.decode(ids[start:index])])
            start = index
    return found


def register_entry(case: dict[str, Any], default_yaml: str) -> str:
    """Register the case's YAML entry (the example's unless the case names another), with its overrides merged
    in (the mock user's address, which only the test knows); the name rows pick it by."""
    entry = next(iter(OmegaConf.load(case.get("loop_yaml") or default_yaml)))
    if case.get("entry"):
        entry = OmegaConf.merge(entry, case["entry"])
    _agent_loop_registry[entry.name] = entry
    return str(entry.name)


async def run_case(case: dict[str, Any], tokenizer: Any, config: Any, yaml_entry: Any) -> dict[str, Any]:
    server = ScriptedServer(tokenizer, case["replies"])
    wiring = {
        "trainer_config": DictConfigWrap(config=config),
        "server_manager": server,
        "tokenizer": tokenizer,
        "processor": None,
        "hf_model_type": None,
        "dataset_cls": RLHFDataset,
        "data_config": DictConfigWrap(config.data),
        "tools": ToolListWrap([]),
    }
    if case.get("response_length"):
        config = OmegaConf.merge(
            config, {"actor_rollout_ref": {"rollout": {"response_length": case["response_length"]}}}
        )
        wiring["trainer_config"] = DictConfigWrap(config=config)
    if case.get("crashing"):
        loop = HarnessAgentLoop(**wiring, envs=crashing_library(load_library(None)), include_invalid=True)
    elif case.get("envs"):
        loop = HarnessAgentLoop(**wiring, envs=case["envs"], include_invalid=True)
    else:
        # Keywords given here override the YAML entry's, as hydra merges them.
        loop = hydra.utils.instantiate(config=_agent_loop_registry[yaml_entry], **wiring, **case.get("settings", {}))
    row = case["row"]
    output = await loop.run({"temperature": 1.0}, **row)
    tensors = output.as_dict()
    return {
        "loop_class": type(loop).__name__,
        "prompt_ids": output.prompt_ids,
        "response_ids": output.response_ids,
        "response_mask": output.response_mask,
        "response_logprobs": output.response_logprobs,
        "reward_score": output.reward_score,
        "rm_scores_last": float(tensors["rm_scores"][-1]),
        "rm_scores_sum": float(tensors["rm_scores"].sum()),
        "num_turns": output.num_turns,
        "metrics": output.metrics.model_dump(),
        "extra_fields": output.extra_fields,
        "inputs": server.inputs,
        "max_tokens": server.max_tokens,
        "spans": spans(tokenizer, output.response_ids, output.response_mask),
        "full_text": tokenizer.decode(output.prompt_ids + output.response_ids),
    }


def dataset_rows(spec: dict[str, Any], tokenizer: Any) -> list[dict[str, Any]]:
    config = OmegaConf.create(
        {"max_prompt_length": 8192, "filter_overlong_prompts": True, "cache_dir": spec["cache_dir"]}
    )
    dataset = RLHFDataset(data_files=[spec["parquet"]], tokenizer=tokenizer, config=config)
    rows = []
    for index in range(len(dataset)):
        row = dataset[index]
        rows.append({key: value for key, value in row.items() if key != "dummy_tensor"})
    return rows


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
    for entry in OmegaConf.load(spec["loop_yaml"]):
        _agent_loop_registry[entry.name] = entry
    config = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"prompt_length": 16384, "response_length": 16384}}, "data": {}}
    )
    result: dict[str, Any] = {"registry": {k: str(v.get("_target_")) for k, v in _agent_loop_registry.items()}}
    for name, parquet in spec.get("conv_parquet", {}).items():
        conv_rows = dataset_rows({**spec, "parquet": parquet}, tokenizer)
        result.setdefault("conv_dataset", {})[name] = [dict(r["extra_info"]) for r in conv_rows]
        for case in spec["cases"]:
            if case.get("conv_dataset") == name:
                case["row"] = {k: v for k, v in conv_rows[case["dataset_index"]].items() if k != "agent_name"}
    if spec.get("parquet"):
        rows = dataset_rows(spec, tokenizer)
        result["dataset"] = [
            {"agent_name": r["agent_name"], "extra_info": dict(r["extra_info"]), "raw_prompt": list(r["raw_prompt"])}
            for r in rows
        ]
        for case in spec["cases"]:
            if "dataset_index" in case and "conv_dataset" not in case:
                row = rows[case["dataset_index"]]
                # AgentLoopWorker passes every non-tensor field but agent_name, which picks the loop.
                case["row"] = {k: v for k, v in row.items() if k != "agent_name"}
    result["cases"] = {}
    try:
        for case in spec["cases"]:
            entry = register_entry(case, spec["loop_yaml"])
            result["cases"][case["name"]] = await run_case(case, tokenizer, config, entry)
    finally:
        close_shared_jails()
    return result


if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    Path(sys.argv[2]).write_text(json.dumps(asyncio.run(main(spec)), default=str), encoding="utf-8")
