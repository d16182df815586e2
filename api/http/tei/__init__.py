"""text-embeddings-inference (TEI) compatibility on the HTTP face: TEI's error statuses
(``errors.py``) and its ``/info`` (``info.py``). TEI's bodies are with the other APIs'
(``endpoints/schemas/tei.py``); the routes are in ``http/paths/tei.py``, where each TEI base
URL (``/tei`` for the default model, ``/tei/<model>`` for any loaded model) serves the routes
TEI serves at its root."""
