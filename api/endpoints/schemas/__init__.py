"""Every body the API reads or answers, as each API defines it, in one place: the inference
routes' (``native.py``: /infer; ``rerank.py``, ``predict.py``, ``chunking.py``), OpenAI's
(``openai.py``; its Files and Batch APIs' in ``batches.py``), TEI's (``tei.py``) and
Cohere's (``cohere.py``); the management routes' (``management.py``: loads, unload, delete;
``listings.py``; ``metrics.py``; ``health.py``) and the project's error shape
(``errors.py``); the fields and name patterns they share (``fields.py``, ``patterns.py``).
The upload of ``POST /infer_image`` is a form, declared with its route
(``http/paths/inference.py``)."""
