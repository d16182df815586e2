"""What the gateway counts and times.

- :mod:`.metrics`: the gateway's Prometheus metrics (one registry for the process);
- :mod:`.requests`: the ASGI middleware that counts and times every HTTP request, and
  the per-request record that deeper code annotates (which model, which error);
- :mod:`.timing`: the timing headers of inference responses;
- :mod:`.scrape`: ``GET /metrics/prometheus``, the gateway's metrics and Triton's in one text.
"""

from .requests import MetricsMiddleware, note_error, tag_model

__all__ = ["MetricsMiddleware", "note_error", "tag_model"]
