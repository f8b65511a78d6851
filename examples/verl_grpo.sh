#!/usr/bin/env bash
# GRPO with verl 0.9.1 on our environments, on a GPU machine (one node; vLLM serves the rollouts).
#
#   pip install 'envharness[train-verl]' vllm          # an environment of its own (verl pins its transformers)
#   bash examples/verl_grpo.sh                          # Qwen3-0.6B, banking, non-conversational, 1 GPU
#   MODE=conv bash examples/verl_grpo.sh                # a simulated user: edit examples/verl_agent_loop_conv.yaml
#   GPUS=8 MODEL=Qwen/Qwen3-8B ENVIRONMENT=hotel_booking bash examples/verl_grpo.sh trainer.total_epochs=3
#   bash examples/verl_grpo.sh --print-overrides        # the overrides only, nothing is written or launched
#
# The rows come from `harness train dataset --format verl` (agent_name: harness, extra_info.scenario_id and mode);
# the `harness` agent loop (examples/verl_agent_loop*.yaml) runs every episode in the jail and puts the rules'
# reward in reward_score, which verl uses as the rollout's score (no reward function to configure). Extra
# arguments are passed on to verl as further overrides.
set -euo pipefail

MODEL=${MODEL:-Qwen/Qwen3-0.6B}
ENVIRONMENT=${ENVIRONMENT:-banking}
MODE=${MODE:-nonconv}
LIBRARY=${LIBRARY:-datasets/seed}
GPUS=${GPUS:-1}
DATA=${DATA:-data/verl-$ENVIRONMENT-$MODE}
if [[ "$MODE" == conv ]]; then
  LOOP=${LOOP:-examples/verl_agent_loop_conv.yaml}
else
  LOOP=${LOOP:-examples/verl_agent_loop.yaml}
fi

overrides=(
  algorithm.adv_estimator=grpo
  algorithm.use_kl_in_reward=false
  data.train_files="$DATA/train.parquet"
  data.val_files="$DATA/train.parquet"
  data.train_batch_size=8
  data.max_prompt_length=4096
  data.max_response_length=4096
  data.filter_overlong_prompts=true
  data.truncation=error
  data.return_raw_chat=true
  actor_rollout_ref.model.path="$MODEL"
  actor_rollout_ref.model.use_remove_padding=true
  actor_rollout_ref.model.enable_gradient_checkpointing=true
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.ppo_mini_batch_size=8
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1
  actor_rollout_ref.actor.use_kl_loss=true
  actor_rollout_ref.actor.kl_loss_coef=0.001
  actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.mode=async
  actor_rollout_ref.rollout.n=4
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.gpu_memory_utilization=0.5
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2
  actor_rollout_ref.rollout.multi_turn.enable=true
  actor_rollout_ref.rollout.multi_turn.format=hermes
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$LOOP"
  actor_rollout_ref.rollout.agent.default_agent_loop=harness
  trainer.critic_warmup=0
  trainer.logger=[console]
  trainer.project_name=envharness
  trainer.experiment_name="grpo-$ENVIRONMENT-$MODE"
  trainer.n_gpus_per_node="$GPUS"
  trainer.nnodes=1
  trainer.val_before_train=false
  trainer.test_freq=-1
  trainer.save_freq=-1
  trainer.total_epochs=1
)

if [[ "${1:-}" == "--print-overrides" ]]; then
  printf '%s\n' "${overrides[@]}"
  exit 0
fi

harness train dataset "$LIBRARY" --format verl --mode "$MODE" -e "$ENVIRONMENT" --out "$DATA"
python -m verl.trainer.main_ppo "${overrides[@]}" "$@"
