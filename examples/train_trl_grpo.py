"""GRPO with TRL on our environments: every tool call and every check runs in the jail.

    python examples/train_trl_grpo.py --tiny                      # CPU, offline: a tiny random model, one step
    python examples/train_trl_grpo.py --model Qwen/Qwen3-0.6B --environment banking --steps 200   # a GPU

The trainer's model calls the environment's tools through TRL's own tool loop (``environment_factory``); the
reward columns are the harness's components (check pass rate, state reward, trajectory match, length penalty,
the composite, upstream EnvScaler's), logged with weight 0 here, while the environment's own ``get_reward`` column
(the rules' reward) drives the update. For conversations with a simulated user, use
``harness.train.trl_rollout.rollout_func``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", default=None, help="A library folder or Hub dataset id (default: the seed).")
    parser.add_argument("--environment", default="banking")
    parser.add_argument("--model", default="Qwen/Qwen3-0.6B")
    parser.add_argument("--tiny", action="store_true", help="A tiny random model and tokenizer built offline.")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--scenarios", type=int, default=4)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from trl import GRPOConfig, GRPOTrainer

    from harness.library import load_library
    from harness.train.trl_dataset import prompt_dataset
    from harness.train.trl_environment import environment_factory
    from harness.train.trl_rewards import COMPONENTS, reward_functions

    library = load_library(args.library)
    if args.tiny:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.doubles.train_trl_tiny import tiny_model, tiny_tokenizer  # the test suite's offline model

        tokenizer = tiny_tokenizer(library, vocab_size=600)
        model = tiny_model(tokenizer)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model)

    dataset = prompt_dataset(library, environments=[args.environment])
    dataset = dataset.select(range(min(args.scenarios, len(dataset))))
    config = GRPOConfig(
        output_dir=args.out or tempfile.mkdtemp(prefix="grpo-"),
        per_device_train_batch_size=4,
        num_generations=2 if args.tiny else 4,
        max_completion_length=16 if args.tiny else 1024,
        max_tool_calling_iterations=2 if args.tiny else 12,
        max_steps=args.steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=args.tiny,
    )
    names = list(COMPONENTS)
    # The components are logged with weight 0; TRL adds the environment's get_reward column (the rules' reward, the
    # composite under harness rules) with weight 1, and that alone drives the update.
    config.reward_weights = [0.0] * len(names)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=config,
        train_dataset=dataset,
        environment_factory=environment_factory(library, environments=[args.environment]),
        reward_funcs=reward_functions(names),
    )
    trainer.train()
    for row in trainer.state.log_history:
        if "reward" in row:
            print({key: value for key, value in row.items() if key.startswith("rewards/") and key.endswith("/mean")})
    for environment in trainer.environments or []:
        outcome = environment.outcome
        if outcome is not None:
            print(outcome.scenario_id, outcome.reason, outcome.reward.composite if outcome.reward else 0.0)


if __name__ == "__main__":
    main()
