#!/usr/bin/env bash
# PPO (GAE + critic, KL in the reward) for a search agent.
#
#   MODEL=path/to/hf_model TRAIN=train.parquet VAL=test.parquet \
#   RETRIEVER_URL=http://127.0.0.1:8000/retrieve  train_scripts/train_ppo.sh [key=value ...]
#
# SCALE=cpu (default) runs a small configuration that fits a laptop; SCALE=gpu uses the
# Search-R1 paper's settings (batch 512, mini-batch 256, 1005 steps, vLLM rollouts,
# response budget 500 tokens, observations 500, top-3 retrieval, 2 searches) on CUDA.
# Every value can still be overridden by a trailing key=value, which wins.
set -euo pipefail
PRESET=${PRESET:-ppo}
: "${MODEL:?set MODEL to a local Hugging Face model directory}"
: "${TRAIN:?set TRAIN to a QA parquet/jsonl file (see data/prepare_qa.py)}"
VAL=${VAL:-$TRAIN}
RETRIEVER_URL=${RETRIEVER_URL:-http://127.0.0.1:8000/retrieve}
TOPK=${TOPK:-3}
EXPERIMENT=${EXPERIMENT:-${PRESET}-$(basename "$MODEL")}
SCALE=${SCALE:-cpu}

common=(
  "actor.model_path=$MODEL"
  "data.train_files=[$TRAIN]"
  "data.val_files=[$VAL]"
  "actor.rollout.tools=[{class_path: agentrl.agent.tools.search.SearchTool, options: {url: '$RETRIEVER_URL', topk: $TOPK}}]"
  "trainer.experiment_name=$EXPERIMENT"
)
if [ "$SCALE" = "gpu" ]; then
  scale=(
    trainer.device=cuda actor.dtype=bfloat16 critic.dtype=bfloat16
    actor.rollout.engine=vllm actor.rollout.gpu_memory_utilization=0.6
    resources.num_gpus_per_worker=1
    data.train_batch_size=512 data.val_batch_size=256
    data.max_prompt_length=4096 data.max_response_length=500
    actor.rollout.max_obs_length=500 actor.rollout.max_tokens_per_turn=500 actor.rollout.max_turns=2
    actor.update.mini_batch_size=256 actor.update.micro_batch_size=64
    critic.update.mini_batch_size=256 critic.update.micro_batch_size=64
    actor.gradient_checkpointing=true
    trainer.total_steps=1005 trainer.save_freq=100 trainer.test_freq=50
    "trainer.logger=[console,jsonl,tensorboard]"
  )
else
  scale=(
    data.train_batch_size=8 data.val_batch_size=32 data.val_limit=64
    data.max_prompt_length=512 data.max_response_length=384
    actor.rollout.max_obs_length=128 actor.rollout.max_tokens_per_turn=96
    actor.update.mini_batch_size=8 actor.update.micro_batch_size=4
    critic.update.mini_batch_size=8 critic.update.micro_batch_size=4
    trainer.total_steps=50 trainer.save_freq=25 trainer.test_freq=25
  )
fi
exec python -m agentrl.trainer.main --preset "$PRESET" "${common[@]}" "${scale[@]}" "$@"
