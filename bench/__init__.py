"""``benchmark.py`` / ``embedgate bench``: load a running server, and measure the model
running bare in-process on the same inputs, so the server's speed has a yardstick.

payloads   what each request carries (deterministic, generated offline)
endpoints  request bodies and response parsing per endpoint (/infer, /v1/embeddings)
loadgen    the asyncio load generator
processes  the server's processes: memory and CPU from /proc
server_stats  Triton's batching counters from the server's /metrics
inprocess  the ONNX file the server serves, run with onnxruntime in this process
report     statistics, the printed summary and the JSON file
cli        the command line that ties them together
"""
