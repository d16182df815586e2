"""text-embeddings-inference (TEI) compatibility: TEI's request and answer shapes, its error
shape and statuses, its ``/info``. The routes are in ``api/http/paths/tei.py``; each TEI
base URL (``/tei`` for the default model, ``/tei/<model>`` for any loaded model) serves the
routes TEI serves at its root."""
