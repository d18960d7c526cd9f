#!/usr/bin/env bash
# Launch the retrieval service: build the index if it is missing, then serve it.
# Run it first (on every training node, or once for a shared pool); training talks to it over HTTP.
#
#   train_scripts/launch_retriever.sh [extra retriever.server args...]
#
# Environment (defaults in brackets):
#   CORPUS        jsonl corpus, one {"id","contents"} passage a line  [none: needed to build an index;
#                 `python data/make_world.py --out runs/world` makes a small one, runs/world/corpus.jsonl]
#   INDEX_DIR     index directory (built if missing)        [indexes/wiki_mini]
#   BACKENDS      backends to build, space separated        [bm25]   e.g. "bm25 dense" for hybrid
#   SERVE_BACKEND backend to serve: auto|dense|bm25|hybrid|pyserini  [auto: hybrid if both are built]
#   MODEL         dense encoder dir (e5-base-v2 for real runs) [pip-shipped all-MiniLM-L6-v2]
#   QUERY_PREFIX / PASSAGE_PREFIX   e.g. "query: " / "passage: " for e5  [empty]
#   INDEX_TYPE    flat|hnsw for dense                       [flat]
#   LUCENE_INDEX  prebuilt Lucene index dir (when BACKENDS includes pyserini)
#   FAISS_INDEX   an existing FAISS index of CORPUS (e.g. wiki-18's e5_Flat.index): the dense
#                 backend attaches it (retriever.attach_index, e5 defaults, MODEL required)
#                 instead of encoding the corpus
#   HOST / PORT   bind address                              [127.0.0.1 / 8000]
#   PYTHON        interpreter                               [.venv/bin/python if present, else python3]
# Extra arguments go to `python -m retriever.server` (see --help: --max-topk, --max-batch-size,
# --batch-wait-ms, --max-pending, --cache-size, --rerank-model, --access-log, ...).
# Stop it with SIGTERM (Ctrl-C): in-flight requests are drained, then it exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

INDEX_DIR=${INDEX_DIR:-indexes/wiki_mini}
BACKENDS=${BACKENDS:-bm25}
SERVE_BACKEND=${SERVE_BACKEND:-auto}
INDEX_TYPE=${INDEX_TYPE:-flat}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export HF_HUB_OFFLINE=1

need_corpus() {  # building backend $1 reads CORPUS: stop with what to set when it is missing
  if [[ -z "${CORPUS:-}" ]]; then
    cat >&2 <<EOF
error: CORPUS is not set: building the $1 index in $INDEX_DIR needs the corpus to index
  Set CORPUS to the jsonl corpus to index, one passage a line: {"id": "...", "contents": "\"Title\"\ntext"}
  (the wiki-18 layout of Search-R1 and FlashRAG). The project builds a small one of its own:
    python data/make_world.py --out runs/world --seed 0
    CORPUS=runs/world/corpus.jsonl INDEX_DIR=indexes/world train_scripts/launch_retriever.sh
EOF
    exit 2
  fi
  if [[ ! -f "$CORPUS" ]]; then
    echo "error: CORPUS=$CORPUS is not a file (a jsonl corpus, one {\"id\", \"contents\"} passage a line; a relative path starts at the repository root)" >&2
    exit 2
  fi
}

built() {  # is backend $1 recorded in the index manifest?
  "$PYTHON" -c 'import sys; from retriever.index import read_manifest; sys.exit(0 if sys.argv[2] in read_manifest(sys.argv[1])["backends"] else 1)' "$INDEX_DIR" "$1"
}

for backend in $BACKENDS; do
  if built "$backend"; then
    echo "[launch_retriever] $backend index present in $INDEX_DIR" >&2
    continue
  fi
  if [[ "$backend" != pyserini ]]; then need_corpus "$backend"; fi
  echo "[launch_retriever] building $backend index in $INDEX_DIR" >&2
  args=(--backend "$backend" --out "$INDEX_DIR")
  case "$backend" in
    pyserini) args+=(--lucene-index "${LUCENE_INDEX:?set LUCENE_INDEX to a prebuilt Lucene index dir}") ;;
    dense)    if [[ -n "${FAISS_INDEX:-}" ]]; then
                "$PYTHON" -m retriever.attach_index --faiss-index "$FAISS_INDEX" --corpus "$CORPUS" \
                  --out "$INDEX_DIR" --model "${MODEL:?set MODEL to the encoder the index was built with}"
                continue
              fi
              args+=(--corpus "$CORPUS" --index-type "$INDEX_TYPE"
                     --query-prefix "${QUERY_PREFIX:-}" --passage-prefix "${PASSAGE_PREFIX:-}")
              if [[ -n "${MODEL:-}" ]]; then args+=(--model "$MODEL"); fi ;;
    *)        args+=(--corpus "$CORPUS") ;;
  esac
  "$PYTHON" -m retriever.build_index "${args[@]}"
done

exec "$PYTHON" -m retriever.server --index "$INDEX_DIR" --backend "$SERVE_BACKEND" \
  --host "$HOST" --port "$PORT" "$@"
