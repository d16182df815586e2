"""embedgate: a FastAPI gateway over NVIDIA Triton for embedding models."""

import os

# The gateway forks a child for each conversion and each tritonserver (uvloop forks),
# and each child execs at once. gRPC's fork handlers, run in a child forked while the
# inference stream's threads are busy, can crash it first; the children need none of
# them. grpc reads this when it is imported, so it is set before anything imports it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

__version__ = "0.1.0"
