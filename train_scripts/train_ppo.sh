#!/usr/bin/env bash
# PPO (GAE + critic, KL in the reward) for a search agent.
#
#   MODEL=path/to/hf_model TRAIN=train.parquet VAL=test.parquet \
#   RETRIEVER_URL=http://127.0.0.1:8000/retrieve  train_scripts/train_ppo.sh [key=value ...]
#
# SCALE=cpu (default) merges agentrl/config/scale_cpu.yaml, a small configuration that fits
# a laptop; SCALE=gpu merges scale_gpu.yaml, the Search-R1 paper's settings (batch 512,
# mini-batch 256, 1005 steps, vLLM rollouts, response budget 500 tokens, observations 500,
# 2 searches) on CUDA; TOPK sets the retrieval depth (default 3).
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
  "actor.rollout.tools=[{class_path: agentrl.tools.retrieval.SearchTool, options: {url: '$RETRIEVER_URL', topk: $TOPK}}]"
  "trainer.experiment_name=$EXPERIMENT"
)
case "$SCALE" in
  cpu|gpu) ;;
  *) echo "SCALE must be cpu or gpu, got '$SCALE'" >&2; exit 2 ;;
esac
exec python -m agentrl.trainer.main --preset "$PRESET" --preset "scale_$SCALE" "${common[@]}" "$@"
