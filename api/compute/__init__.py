"""The compute path: texts, pairs or images in, vectors or scores out.

- ``service.py``: :class:`~.service.EmbeddingService`, what the endpoints call, built of:
  ``dispatch.py`` (every run, online or in the bulk lane, through the step its kind chose:
  the response cache, admission by cost, the route's coalescer, then the step),
  ``bulk_lane.py`` (a batch job's lines), ``engine.py`` (what a step may ask of the compute
  side: the tokenizer pool, the image threads, the backend);
- ``requests/``: what a request means (asks and plans, prompts, routes, the steps they run
  in, kinds, precisions, activations, results);
- ``scheduling/``: how work is scheduled (coalescing, admission, pacing, backlog, fair
  queueing, spreading, per-key rates);
- ``backend/``: the one seam to what runs the model (Triton, or no model at all);
- ``cache.py``, ``tokens.py``, ``images/``: the response cache, tokenizing in full, and
  image inputs (fetched, decoded, resized);
- ``document_chunks.py``: a request's texts cut into chunks of the model's tokens, each
  embedded (the cutting itself: ``requests/chunking.py``).
"""
