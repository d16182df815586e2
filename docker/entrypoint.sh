#!/usr/bin/env bash
# Runs tritonserver and the gateway in one container. Triton listens on loopback only:
# its control API accepts model files and must never be exposed. If either process
# exits, the container exits, and the orchestrator restarts it; the gateway then loads
# again the models listed in the repository's manifest.
set -euo pipefail

ready() {
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' "$1" 2>/dev/null
}

tritonserver \
    --model-repository="${EMBEDGATE_MODEL_REPOSITORY}" \
    --model-control-mode=explicit \
    --disable-auto-complete-config \
    --http-address=127.0.0.1 --http-port=8000 \
    --grpc-address=127.0.0.1 --grpc-port=8001 \
    --metrics-address=127.0.0.1 --metrics-port=8002 \
    --strict-readiness=true \
    --exit-timeout-secs=10 &
triton_pid=$!

until ready http://127.0.0.1:8000/v2/health/ready; do
    kill -0 "$triton_pid" 2>/dev/null || { echo "tritonserver exited during startup" >&2; exit 1; }
    sleep 0.5
done

embedgate serve "$@" &
gateway_pid=$!

# Stop the gateway first: it closes its connections to Triton, which otherwise waits out
# its exit timeout on them.
stop() {
    kill -TERM "$gateway_pid" 2>/dev/null || true
    wait "$gateway_pid" 2>/dev/null || true
    kill -TERM "$triton_pid" 2>/dev/null || true
    wait "$triton_pid" 2>/dev/null || true
}
trap 'stop; exit 143' TERM INT

status=0
wait -n "$triton_pid" "$gateway_pid" || status=$?
echo "a process exited (status $status); stopping the container" >&2
stop
exit "$status"
