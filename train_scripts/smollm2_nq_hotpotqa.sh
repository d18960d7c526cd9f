#!/usr/bin/env bash
# SmolLM2-135M-Instruct learns to search on real questions: held-out split, SFT warm start from
# demonstrations played through the real rollout, GRPO (full, LoRA, dynamic sampling), every model on the
# held-out NQ / HotpotQA / TriviaQA / PopQA questions (docs/results.md, "Trained").
#
#   DATA_DIR=path/to/data [OUT=runs/search_qa] train_scripts/smollm2_nq_hotpotqa.sh [recipe args]
#
# DATA_DIR (required) holds the QA files and corpus in the FlashRAG / Search-R1 layout: nq/test.jsonl,
# nq/dev_efficientqa.jsonl, hotpotqa/dev.jsonl, hotpotqa/dev_with_context.jsonl, triviaqa/test.jsonl,
# popqa/test_sample1000.jsonl and corpus/wiki_mini.jsonl (data/README.md names the NQ and HotpotQA
# files' sources).
# Resumable: every phase writes OUT/phases/<phase>.json when it ends and is skipped on a rerun;
# the RL phases also resume from their last checkpoint. Extra arguments go to the recipe
# (e.g. --only split demos sft, or --profile tiny for the test-sized run).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${DATA_DIR:-}" ]]; then
  cat >&2 <<'EOF'
error: DATA_DIR is not set: set it to the folder of QA files and corpus in the FlashRAG / Search-R1 layout
  (nq/test.jsonl, nq/dev_efficientqa.jsonl, hotpotqa/dev.jsonl, hotpotqa/dev_with_context.jsonl,
  triviaqa/test.jsonl, popqa/test_sample1000.jsonl, corpus/wiki_mini.jsonl; data/README.md names the NQ and HotpotQA files' sources)
EOF
  exit 2
fi
if [[ ! -d "$DATA_DIR" ]]; then
  echo "error: DATA_DIR=$DATA_DIR is not a directory (a relative path starts at the repository root)" >&2
  exit 2
fi
OUT=${OUT:-runs/search_qa}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
PYTHON=${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3 )}
exec "$PYTHON" -m agentrl.recipes.search_qa --data-dir "$DATA_DIR" --out "$OUT" "$@"
