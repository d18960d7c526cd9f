#!/usr/bin/env bash
# Evaluate a model directory or a training checkpoint on QA datasets (direct / rag / agent).
#
#   train_scripts/evaluate.sh --model runs/x/checkpoints/step_100 \
#       --data nq=DATA_DIR/nq/test.jsonl \
#       --data hotpotqa=DATA_DIR/hotpotqa/dev.jsonl --require hotpotqa=all_supporting_in_corpus \
#       --limit 200 --mode direct rag agent \
#       --retriever-url http://127.0.0.1:8000/retrieve --out runs/x/eval
#
# DATA_DIR: the folder of QA files in the FlashRAG / Search-R1 layout (not part of the repository).
# Writes OUT/<mode>/{predictions.jsonl,metrics.json,metrics.md} and OUT/summary.md; the same
# command continues an interrupted run. `--help` lists decoding and budget options.
#
#   train_scripts/evaluate.sh --grid [--limit N] [--cells direct,rag:bm25,...]
#
# runs the docs/results.md grid (benchmarks/results_table.py): it starts its own retriever
# servers from indexes/wiki_mini and re-renders the table in docs/results.md (its questions:
# --nq DATA_DIR/nq/test.jsonl --hotpotqa DATA_DIR/hotpotqa/dev.jsonl; default ../shared/data/).
set -euo pipefail
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--grid" ]; then
  shift
  exec python -m benchmarks.results_table "$@"
fi
exec python -m agentrl.eval "$@"
