#!/usr/bin/env bash
# The GPU benchmark of docs/gpu.md: a MiniLM-shaped and a base-size sentence-transformer
# (random weights, the speed of a shape), served by `embedgate serve` on this host's GPU,
# single sentences and 32-sentence requests at a few client counts, each set against
# sentence-transformers in this process on the same GPU (float16, length-sorted batches)
# and against the forward alone (the GPU's limit), measured in the same run.
#
#   bash bench/gpu_sweep.sh TOKENIZER_DIR OUT_DIR [minilm] [base] [tiny]
#
# TOKENIZER_DIR: a model directory with a BERT WordPiece tokenizer (all-MiniLM-L6-v2's).
# Writes OUT_DIR/<model>-<payload>-<clients>.json (benchmark.py reports),
# OUT_DIR/<model>-<payload>-reference.json (bench/torch_reference.py), the load answers,
# listings and GPU memory (<model>-gpu-memory.prom: the instances' embedgate_gpu_memory_bytes;
# <model>-nvidia-smi.csv), and serve.log.
#
# Every row sends inputs of its own (its own --seed): the response cache on, no row is
# answered with another's inputs, and each report counts the inputs answered from the
# cache (cached_inputs), which the table shows.
#
# tiny (1 layer x 32) is a model whose forward costs next to nothing: the server's own cost.
#
# Environment: DEVICE (default cuda) and DTYPE (float16): where and in what precision the
# in-process reference and the peer run (DEVICE=cpu DTYPE=float32 tries the sweep on a host
# without a GPU); SINGLE_CLIENTS (default "1 256") and BATCH_CLIENTS ("64"): client counts of
# the two payloads; DURATION (10) and WARMUP (3) seconds per row; LOAD_PROCESSES (4): load
# generator processes at 64 clients or more (one Python process cannot send 15,000
# requests/s); REFERENCE_REQUESTS_SINGLE (8192), REFERENCE_REQUESTS_BATCH (1024) and
# REFERENCE_LATENCY_CALLS (200): the in-process reference's inputs and timed calls;
# REFERENCE_DIR: a sweep of the same models whose references (and forward limits) this one
# reuses instead of measuring its own (a run of the same server with other settings, given
# as EMBEDGATE_* variables or TOKENIZERS_PARALLELISM, which settings.txt lists).
# PEER=infinity: after each model's rows, the same rows (the same inputs, the same client
# counts) against infinity-emb's torch engine on the same GPU, serving the same model
# (written as sentence-transformers 3 reads it: bench/peer_layout.py), float16, its own
# defaults otherwise (no access log): OUT_DIR/<model>-<payload>-<clients>.infinity.json, infinity.log.
# INFINITY (default "infinity_emb") is its command, PEER_PORT (7997) its port.
set -euo pipefail
TOKENIZER=$1 OUT=$2
shift 2
MODELS=${*:-minilm base}
PY=${PYTHON:-python3}
PORT=${EMBEDGATE_PORT:-8686}
URL=http://127.0.0.1:$PORT
WORK=$(mktemp -d)
SINGLE_CLIENTS=${SINGLE_CLIENTS:-1 256}
BATCH_CLIENTS=${BATCH_CLIENTS:-64}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-3}
LOAD_PROCESSES=${LOAD_PROCESSES:-4}
DEVICE=${DEVICE:-cuda}
DTYPE=${DTYPE:-float16}
mkdir -p "$OUT"
env | grep -E '^(EMBEDGATE|TOKENIZERS)_' | sort >"$OUT/settings.txt" || true

EMBEDGATE_PORT=$PORT EMBEDGATE_MODEL_REPOSITORY=$WORK/repo EMBEDGATE_MAX_INFLIGHT_REQUESTS=${EMBEDGATE_MAX_INFLIGHT_REQUESTS:-4096} \
  $PY -m embedgate.api serve >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 600); do
  curl -sf "$URL/health/ready" >/dev/null && break
  kill -0 $SERVER 2>/dev/null || { echo "embedgate serve exited:"; tail -20 "$OUT/serve.log"; exit 1; }
  sleep 0.2
done

run_peer() {  # model name, then "payload clients seed" per row
  local name=$1 port=${PEER_PORT:-7997} row payload clients row_seed processes
  shift
  $PY -m embedgate.bench.peer_layout --model-path "$WORK/$name" --out "$WORK/$name-v3" >/dev/null
  # Its telemetry off: the host may have no network.
  INFINITY_ANONYMOUS_USAGE_STATS=0 DO_NOT_TRACK=1 ${INFINITY:-infinity_emb} v2 --model-id "$WORK/$name-v3" \
    --served-model-name "random/$name" --engine torch --device "$DEVICE" --dtype "$DTYPE" --host 127.0.0.1 --port "$port" \
    --url-prefix /v1 --log-level warning >>"$OUT/infinity.log" 2>&1 &
  local peer=$!
  for _ in $(seq 900); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    kill -0 $peer 2>/dev/null || { echo "infinity exited:"; tail -20 "$OUT/infinity.log"; return 1; }
    sleep 0.2
  done
  for row in "$@"; do
    read -r payload clients row_seed <<<"$row"
    processes=$([ "$clients" -ge 64 ] && echo "$LOAD_PROCESSES" || echo 1)
    $PY benchmark.py --url "http://127.0.0.1:$port" --endpoint /v1/embeddings --model "random/$name" --no-load \
      --payload "$payload" --concurrency "$clients" --load-processes "$processes" --seed "$row_seed" \
      --duration "$DURATION" --warmup "$WARMUP" --server-pid $peer --json "$OUT/$name-$payload-$clients.infinity.json" >/dev/null
  done
  kill $peer 2>/dev/null
  wait $peer 2>/dev/null || true
}

seed=0
for name in $MODELS; do
  rows=()
  case $name in
    minilm) shape="--layers 6 --hidden 384" ;;
    base) shape="--layers 12 --hidden 768" ;;
    tiny) shape="--layers 1 --hidden 32" ;;
  esac
  $PY -m embedgate.bench.random_models --tokenizer "$TOKENIZER" $shape --out "$WORK/$name" >/dev/null 2>&1
  curl -sf -X POST "$URL/load_sentence_transformer_model" -H 'content-type: application/json' \
    -d "{\"model_name\": \"random/$name\", \"model_path\": \"$WORK/$name\"}" >"$OUT/$name-load.json"
  curl -sf "$URL/loaded_models" >"$OUT/$name-listing.json"
  curl -sf "$URL/metrics/prometheus" | grep '^embedgate_gpu_memory_bytes' >"$OUT/$name-gpu-memory.prom" || true
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >"$OUT/$name-nvidia-smi.csv" 2>&1 || true
  for payload in single batch; do
    # The forward limit is measured once per model, on the 32-sentence payload's texts.
    if [ $payload = single ]; then
      clients_list=$SINGLE_CLIENTS requests=${REFERENCE_REQUESTS_SINGLE:-8192} forward=""
    else
      clients_list=$BATCH_CLIENTS requests=${REFERENCE_REQUESTS_BATCH:-1024} forward=512,2048
    fi
    if [ -n "${REFERENCE_DIR:-}" ]; then
      cp "$REFERENCE_DIR/$name-$payload-reference.json" "$OUT/"
    else
      $PY -m embedgate.bench.torch_reference --model-path "$WORK/$name" --device "$DEVICE" --dtype "$DTYPE" --payload $payload \
        --requests "$requests" --batch-sizes 256 --latency-calls "${REFERENCE_LATENCY_CALLS:-200}" --forward-batch-sizes "$forward" \
        --json "$OUT/$name-$payload-reference.json" >/dev/null 2>>"$OUT/reference.log"
    fi
    for clients in $clients_list; do
      seed=$((seed + 1))
      processes=$([ "$clients" -ge 64 ] && echo "$LOAD_PROCESSES" || echo 1)
      $PY benchmark.py --url "$URL" --model "random/$name" --no-load --payload $payload --concurrency "$clients" \
        --load-processes "$processes" --seed $seed --duration "$DURATION" --warmup "$WARMUP" \
        --json "$OUT/$name-$payload-$clients.json" >/dev/null
      rows+=("$payload $clients $seed")
    done
  done
  if [ "${PEER:-}" = infinity ]; then
    run_peer "$name" "${rows[@]}" || echo "infinity's rows of $name failed" >&2
  fi
done
$PY -m embedgate.bench.gpu_table "$OUT"
