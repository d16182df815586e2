"""Image inputs: fetched (SSRF-guarded, ``fetch.py`` and ``addresses.py``), decoded and
resized off the event loop (``loader.py``)."""
