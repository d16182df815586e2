"""The ``embedgate`` command (``main.py``) and the HTTP client it talks to a server with
(``client.py``)."""
