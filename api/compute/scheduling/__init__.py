"""How work is scheduled: whether the gateway or Triton batches (``batching.py``), the
gateway's batcher (``coalescing.py``), its queue (``waiting.py``), where a key's request
goes in it (``fair_queue.py``) and which keys' requests leave in calls of their own
(``light_keys.py``), admission by count and by cost (``admission.py``, ``pacing.py``,
``cost_admission.py``, ``backlog.py``), large requests spread over idle instances
(``spreading.py``), per-key limits (``rates.py``) and the key of the request in progress
(``tenants.py``)."""
