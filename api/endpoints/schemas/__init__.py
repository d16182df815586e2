"""The bodies of the inference routes, as each API defines them: the native API's
(``native.py``: /infer; ``rerank.py``, ``predict.py``), OpenAI's (``openai.py``) and TEI's
(``tei.py``), and the fields and name patterns they share (``fields.py``, ``patterns.py``)."""
