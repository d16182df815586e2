#!/usr/bin/env bash
# Runs tritonserver and the gateway in one container. Triton listens on loopback only:
# its control API accepts model files and must never be exposed. If either process
# exits, the container exits, and the orchestrator restarts it; the gateway then loads
# again the models listed in the repository's manifest.
set -euo pipefail

tritonserver \
    --model-repository="${EMBEDGATE_MODEL_REPOSITORY}" \
    --model-control-mode=explicit \
    --http-address=127.0.0.1 --http-port=8000 \
    --grpc-address=127.0.0.1 --grpc-port=8001 \
    --metrics-address=127.0.0.1 --metrics-port=8002 \
    --strict-readiness=true \
    --exit-timeout-secs=10 &
triton_pid=$!

until curl -fsS http://127.0.0.1:8000/v2/health/ready >/dev/null 2>&1; do
    kill -0 "$triton_pid" 2>/dev/null || { echo "tritonserver exited during startup" >&2; exit 1; }
    sleep 0.5
done

embedgate serve "$@" &
gateway_pid=$!

trap 'kill -TERM "$gateway_pid" 2>/dev/null; wait "$gateway_pid"; kill -TERM "$triton_pid" 2>/dev/null; wait "$triton_pid"' TERM INT
wait -n "$triton_pid" "$gateway_pid"
status=$?
kill -TERM "$gateway_pid" "$triton_pid" 2>/dev/null || true
wait || true
exit "$status"
