"""What the gateway counts and times.

- :mod:`.metrics`: the gateway's Prometheus metrics (one registry for the process);
- :mod:`.requests`: the ASGI middleware that counts and times every HTTP request, and
  the per-request record that deeper code annotates (which model, which error);
- :mod:`.scrape`: one Prometheus text with the gateway's metrics, its state and Triton's.

A leaf: it imports nothing else of the gateway; callers hand it what to count.
"""

from .requests import MetricsMiddleware, count_inputs, note_error, tag_key, tag_model

__all__ = ["MetricsMiddleware", "count_inputs", "note_error", "tag_key", "tag_model"]
