"""The verl ``harness`` agent loop on CPU: a tiny random model, a few seed scenarios, rewards and mask counts.

    # in the environment with envharness[train-verl] (verl 0.9.1), from the repository's root:
    python examples/verl_rollout.py                       # 3 banking scenarios, both modes
    python examples/verl_rollout.py --mode conv --scenarios 5 --json

Nothing is downloaded: the tokenizer is trained here on the library's text and the two-layer Qwen3 is randomly
initialised (the test suite's offline model). The loop is built from ``examples/verl_agent_loop.yaml`` the way
verl's ``AgentLoopWorker`` builds it (hydra), on the rows ``harness train dataset --format verl`` writes;
``CpuServer`` stands in for verl's LLM server (same ``generate`` signature) and samples from the model. A random
model almost never ends its turn, so the server adds ``--eos-bias`` to the end-of-turn logit and reports the
log-probabilities of the distribution it sampled from. In conversational mode an offline user says the task,
asks one follow-up and stops (a real run uses ``agents.training_user.conversation_user``: an LLM through
harness.llm; see ``examples/verl_agent_loop_conv.yaml``). Each line shows how the rollout ended, its reward and
how many response tokens the policy generated (mask 1) and how many came from the tools and the user (mask 0).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FOLLOW_UP = "Is everything done now?"


class CpuServer:
    """verl's ``LLMServerClient.generate`` on a local model: samples ``max_tokens`` at most, stops at the end of
    the turn, returns the sampled ids and their log-probabilities under the (biased, tempered) distribution."""

    def __init__(self, model: Any, tokenizer: Any, eos_bias: float) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.eos_bias = eos_bias
        self.inputs: list[list[int]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> Any:
        import torch
        from transformers import LogitsProcessor, LogitsProcessorList
        from verl.workers.rollout.replica import TokenOutput

        eos, bias = self.tokenizer.eos_token_id, self.eos_bias

        class EosBias(LogitsProcessor):
            def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
                scores[:, eos] += bias
                return scores

        self.inputs.append(list(prompt_ids))
        inputs = torch.tensor([prompt_ids])
        with torch.no_grad():
            output = self.model.generate(
                input_ids=inputs,
                attention_mask=torch.ones_like(inputs),
                max_new_tokens=int(sampling_params["max_tokens"]),
                do_sample=True,
                temperature=float(sampling_params.get("temperature", 1.0)),
                logits_processor=LogitsProcessorList([EosBias()]),
                eos_token_id=eos,
                pad_token_id=self.tokenizer.pad_token_id,
                return_dict_in_generate=True,
                output_scores=True,
            )
        new = output.sequences[0, len(prompt_ids) :].tolist()
        logprobs = [
            float(torch.log_softmax(scores[0].float(), dim=-1)[token])
            for scores, token in zip(output.scores, new, strict=False)
        ]
        return TokenOutput(token_ids=new, log_probs=logprobs, stop_reason="completed" if new[-1] == eos else "length")


class OfflineUser:
    """The conversational example's user: says the task, asks one follow-up, then says the stop token."""

    def __init__(self, scenario: Any) -> None:
        from harness.schema import AgentSettings, ModelSettings

        self.scenario = scenario
        self.settings = AgentSettings(kind="simulated_user", role="user", model=ModelSettings(model="offline"))

    async def respond(self, messages: list[dict[str, Any]]) -> Any:
        from harness.rules.protocols import STOP, UserTurn

        said = sum(1 for message in messages if message.get("role") == "assistant")
        lines = [self.scenario.task, FOLLOW_UP]
        return UserTurn(text=lines[said]) if said < len(lines) else UserTurn(text=STOP, stop_token=STOP)


def summary(output: Any, server: CpuServer, mode: str) -> dict[str, Any]:
    mask, logprobs = output.response_mask, output.response_logprobs
    inputs = server.inputs
    full = output.prompt_ids + output.response_ids
    return {
        "scenario_id": output.extra_fields["scenario_id"],
        "mode": mode,
        "ending": output.extra_fields["ending"],
        "reward": output.reward_score,
        "generations": len(inputs),
        "policy_tokens": sum(mask),
        "other_tokens": len(mask) - sum(mask),
        "mask_runs": [flag for flag, _ in itertools.groupby(mask)],
        # Each generation's input is a prefix of the next and of the final sequence: nothing was re-tokenized.
        "prefix_ok": all(later[: len(earlier)] == earlier for earlier, later in itertools.pairwise([*inputs, full])),
        "logprobs_ok": all((lp != 0.0) == bool(flag) for lp, flag in zip(logprobs, mask, strict=True)),
        "stopped_by": output.extra_fields["stopped_by"],
    }


async def rollouts(args: argparse.Namespace) -> list[dict[str, Any]]:
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from harness.library import load_library
    from harness.train.verl_agent_loop import close_shared_jails
    from harness.train.verl_dataset import verl_rows
    from tests.doubles.tiny_chat_template import TINY_HERMES_TEMPLATE
    from tests.doubles.train_trl_tiny import tiny_model, tiny_tokenizer  # the test suite's offline model

    library = load_library(args.library)
    tokenizer = tiny_tokenizer(library, vocab_size=600, chat_template=TINY_HERMES_TEMPLATE)
    model = tiny_model(tokenizer, seed=args.seed)
    (entry,) = OmegaConf.load(ROOT / "examples" / "verl_agent_loop.yaml")
    _agent_loop_registry[entry.name] = entry
    rollout = {"prompt_length": 16384, "response_length": args.response_length, "temperature": 1.0}
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}, "data": {}})
    modes = ["nonconv", "conv"] if args.mode == "both" else [args.mode]
    results = []
    try:
        for mode in modes:
            rows = verl_rows(library, environments=[args.environment], mode=mode)[: args.scenarios]
            for row in rows:
                server = CpuServer(model, tokenizer, args.eos_bias)
                loop = hydra.utils.instantiate(
                    config=_agent_loop_registry[entry.name],
                    trainer_config=DictConfigWrap(config=config),
                    server_manager=server,
                    tokenizer=tokenizer,
                    processor=None,
                    hf_model_type=None,
                    dataset_cls=RLHFDataset,
                    data_config=DictConfigWrap(config.data),
                    tools=ToolListWrap([]),
                    envs=args.library or str(ROOT / "datasets" / "seed"),
                    user=OfflineUser,
                    max_turns=args.max_turns,
                )
                output = await loop.run(
                    {"temperature": 1.0}, raw_prompt=row["prompt"], extra_info=row["extra_info"], index=0
                )
                results.append(summary(output, server, mode))
    finally:
        close_shared_jails()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", default=None, help="A library folder or Hub dataset id (default: the seed).")
    parser.add_argument("--environment", default="banking")
    parser.add_argument("--scenarios", type=int, default=3)
    parser.add_argument("--mode", choices=["nonconv", "conv", "both"], default="both")
    parser.add_argument("--response-length", type=int, default=256, help="rollout.response_length (tokens).")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--eos-bias", type=float, default=2.0, help="Added to the end-of-turn logit.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="One JSON object per rollout instead of a table.")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    results = asyncio.run(rollouts(args))
    for result in results:
        if args.json:
            print(json.dumps(result))
        else:
            print(
                f"{result['scenario_id']:28} {result['mode']:8} {result['ending']:14} reward {result['reward']:.3f}"
                f"  generations {result['generations']}  mask 1: {result['policy_tokens']:4}"
                f"  mask 0: {result['other_tokens']:4}  prefix ok {result['prefix_ok']}"
            )


if __name__ == "__main__":
    main()
