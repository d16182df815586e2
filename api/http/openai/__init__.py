"""OpenAI compatibility on the HTTP face: which paths answer errors in OpenAI's shape
(``errors.py``). OpenAI's bodies are with the other APIs' (``endpoints/schemas/openai.py``,
``batches.py``); the routes are in ``http/paths/openai.py`` and ``batches.py``."""
