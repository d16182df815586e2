#!/usr/bin/env bash
# docs/gpu.md's checks on a GPU host with no package index, from what pack.sh packed: the
# GPU sweep (embedgate's rows, the in-process reference and the forward limit, infinity's
# rows; bench/gpu_sweep.sh), then the GPU tests, within BUDGET seconds in all.
#
#   bash bench/offline_gpu/run.sh BUNDLE_DIR OUT_DIR       # in the checkout's root, on the GPU host
#
# Installs nothing outside /tmp/offline_gpu, this checkout (pip install -e, no index) and the
# embedded Triton's environment (~/.cache/embedgate/triton-runtime-pyX.Y). OUT_DIR gets
# env.txt (the GPU, the packages), sweep.txt (the table) and sweep.tgz (its reports),
# tests-gpu.log (tests/integration/test_gpu.py as it is: float16 graphs) and tests-kinds.log
# (each kind's integration tests on GPU instances, float32 graphs, held to the parity the CPU
# runs are held to). REHEARSE=1 runs the same steps on a host without a GPU, on the CPU, in
# minutes (a tiny model, short rows) to try the bundle.
#
# Environment: PYTHON (python3), BUDGET (555 s), PARTS ("sweep tests": either alone in one
# call, for two calls of a device's time), SWEEP_SECONDS (320 with the tests, 480 alone: two
# models' rows with infinity's take about 370 s on an H100), MODELS ("minilm base"), and
# bench/gpu_sweep.sh's (DURATION, WARMUP...).
set -u
BUNDLE=$(cd "$1" && pwd)
OUT=$2
T0=$(date +%s)
PY=${PYTHON:-python3}
BUDGET=${BUDGET:-555}
at() { echo "[$(($(date +%s) - T0)) s] $*"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1

at "unpacking"
ROOT=/tmp/offline_gpu
rm -rf "$ROOT" && mkdir -p "$ROOT"
tar xJf "$BUNDLE/site.tar.xz" -C "$ROOT" && tar xJf "$BUNDLE/peer.tar.xz" -C "$ROOT" || exit 1
export PYTHONPATH=$ROOT/site
$PY -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/setup.log" 2>&1 || { tail "$OUT/setup.log"; exit 1; }
# The embedded Triton's environment, as `embedgate triton-runtime` makes it (there from
# wheels): nvidia-pytriton and numpy 1, then this Python's packages.
RUNTIME=$($PY -c "from embedgate.api.triton.bundle import default_runtime; print(default_runtime())")
rm -rf "$RUNTIME" && $PY -m venv --without-pip "$RUNTIME" || exit 1
SITE=$("$RUNTIME/bin/python3" -c "import sysconfig; print(sysconfig.get_path('purelib'))")
tar xJf "$BUNDLE/runtime.tar.xz" -C "$SITE" || exit 1
$PY - "$SITE" "$RUNTIME/bin/python3" <<'EOF' || exit 1
import sys
from pathlib import Path

from embedgate.api.triton.runtime import _PTH, describe, gateway_site_dirs

Path(sys.argv[1], _PTH).write_text("".join(f"{entry}\n" for entry in gateway_site_dirs()))
print(describe(Path(sys.argv[2])))
EOF
{
  nvidia-smi 2>&1 | head -20
  echo "cores $(nproc)"
  $PY -c "import sys, torch, transformers, sentence_transformers, tokenizers, onnxruntime, numpy
print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__,
      'sentence-transformers', sentence_transformers.__version__, 'tokenizers', tokenizers.__version__,
      'onnxruntime', onnxruntime.__version__, 'numpy', numpy.__version__)"
  $PY -c "from embedgate.api.triton import gpus; print('GPU instances:', gpus.available())"
} >"$OUT/env.txt" 2>&1
tail -3 "$OUT/env.txt"

PARTS=${PARTS:-sweep tests}
case " $PARTS " in *" tests "*) sweep_seconds=320 ;; *) sweep_seconds=480 ;; esac
KINDS_INSTANCES=$([ "${REHEARSE:-0}" = 1 ] && echo cpu || echo gpu)
if [[ " $PARTS " == *" sweep "* ]]; then
at "the sweep"
SWEEP=$ROOT/sweep
if [ "${REHEARSE:-0}" = 1 ]; then
  export DEVICE=cpu DTYPE=float32 SINGLE_CLIENTS="1 8" BATCH_CLIENTS=8 DURATION=2 WARMUP=1
  export REFERENCE_REQUESTS_SINGLE=256 REFERENCE_REQUESTS_BATCH=32 REFERENCE_LATENCY_CALLS=20
  MODELS=${MODELS:-tiny}
else
  export SINGLE_CLIENTS=${SINGLE_CLIENTS:-1 256} BATCH_CLIENTS=${BATCH_CLIENTS:-64} DURATION=${DURATION:-4} WARMUP=${WARMUP:-2}
  export REFERENCE_REQUESTS_SINGLE=${REFERENCE_REQUESTS_SINGLE:-4096} REFERENCE_REQUESTS_BATCH=${REFERENCE_REQUESTS_BATCH:-512}
  export REFERENCE_LATENCY_CALLS=${REFERENCE_LATENCY_CALLS:-100}
  MODELS=${MODELS:-minilm base}
  nvidia-smi dmon -s u -d 1 >"$ROOT/gpu-busy.txt" 2>&1 &
  DMON=$!
fi
PEER=infinity INFINITY="env PYTHONPATH=$ROOT/peer:$ROOT/site $PY -m infinity_emb.cli" PYTHON=$PY \
  timeout "${SWEEP_SECONDS:-$sweep_seconds}" bash bench/gpu_sweep.sh "$BUNDLE/tokenizer" "$SWEEP" $MODELS >"$OUT/sweep.txt" 2>&1
echo "the sweep's exit code: $?" >>"$OUT/sweep.txt"
[ -n "${DMON:-}" ] && kill "$DMON" 2>/dev/null && cp "$ROOT/gpu-busy.txt" "$SWEEP/"
tar czf "$OUT/sweep.tgz" -C "$ROOT" sweep
grep -E '^\|' "$OUT/sweep.txt" | tail -8
tail -1 "$OUT/sweep.txt"
fi
[[ " $PARTS " == *" tests "* ]] || { at "done"; exit 0; }

at "the tests ($(left) s left)"
limit=$(($(left) - 15))
tests=tests/integration
timeout $limit $PY -m pytest -q -ra -p no:cacheprovider $tests/test_gpu.py >"$OUT/tests-gpu.log" 2>&1 &
GPU_TESTS=$!
EMBEDGATE_INSTANCE_KIND=$KINDS_INSTANCES EMBEDGATE_GPU_FLOAT16=false EMBEDGATE_INSTANCE_COUNT=1 \
  timeout $limit $PY -m pytest -q -ra -p no:cacheprovider -n 4 --dist loadfile \
  $tests/test_routes.py $tests/test_kinds.py $tests/test_multi_vector.py $tests/test_clip.py \
  $tests/test_architectures.py $tests/test_llm_rerankers.py $tests/test_static.py $tests/test_chunking.py >"$OUT/tests-kinds.log" 2>&1
echo "exit code: $?" >>"$OUT/tests-kinds.log"
wait $GPU_TESTS
echo "exit code: $?" >>"$OUT/tests-gpu.log"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv >>"$OUT/env.txt" 2>&1
tail -6 "$OUT/tests-gpu.log"
tail -12 "$OUT/tests-kinds.log"
at "done"
