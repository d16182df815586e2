#!/usr/bin/env bash
# The GPU benchmark of docs/gpu.md: a MiniLM-shaped and a base-size sentence-transformer
# (random weights, the speed of a shape), served by `embedgate serve` on this host's GPU,
# at 1, 8, 64 and 256 clients, single sentences and 32-sentence requests, each set against
# sentence-transformers in this process on the same GPU (float16, length-sorted batches).
#
#   bash bench/gpu_sweep.sh TOKENIZER_DIR OUT_DIR [minilm] [base]
#
# TOKENIZER_DIR: a model directory with a BERT WordPiece tokenizer (all-MiniLM-L6-v2's).
# Writes OUT_DIR/<model>-<payload>-<clients>.json (benchmark.py reports),
# OUT_DIR/<model>-<payload>-reference.json (bench/torch_reference.py) and serve.log.
set -euo pipefail
TOKENIZER=$1 OUT=$2
shift 2
MODELS=${*:-minilm base}
PY=${PYTHON:-python3}
PORT=${EMBEDGATE_PORT:-8686}
URL=http://127.0.0.1:$PORT
WORK=$(mktemp -d)
CLIENTS=${CLIENTS:-1 8 64 256}
DURATION=${DURATION:-10}
mkdir -p "$OUT"

EMBEDGATE_PORT=$PORT EMBEDGATE_MODEL_REPOSITORY=$WORK/repo EMBEDGATE_MAX_INFLIGHT_REQUESTS=1024 \
  $PY -m embedgate.api serve >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 600); do curl -sf "$URL/health/ready" >/dev/null && break; sleep 0.2; done

for name in $MODELS; do
  case $name in
    minilm) shape="--layers 6 --hidden 384" ;;
    base) shape="--layers 12 --hidden 768" ;;
  esac
  $PY -m embedgate.bench.random_models --tokenizer "$TOKENIZER" $shape --out "$WORK/$name" >/dev/null
  curl -sf -X POST "$URL/load_sentence_transformer_model" -H 'content-type: application/json' \
    -d "{\"model_name\": \"random/$name\", \"model_path\": \"$WORK/$name\"}" >"$OUT/$name-load.json"
  curl -sf "$URL/loaded_models" >"$OUT/$name-listing.json"
  for payload in single batch; do
    requests=$([ $payload = single ] && echo 20000 || echo 1000)
    $PY -m embedgate.bench.torch_reference --model-path "$WORK/$name" --payload $payload \
      --requests $requests --json "$OUT/$name-$payload-reference.json" >/dev/null
    for clients in $CLIENTS; do
      $PY benchmark.py --url "$URL" --model "random/$name" --no-load --payload $payload --concurrency $clients \
        --duration "$DURATION" --warmup 3 --json "$OUT/$name-$payload-$clients.json" >/dev/null
    done
  done
done
$PY -m embedgate.bench.gpu_table "$OUT"
