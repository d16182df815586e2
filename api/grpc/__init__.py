"""TEI's gRPC API (text-embeddings-inference's package ``tei.v1``), served beside the HTTP
routes on ``EMBEDGATE_GRPC_PORT`` by the same endpoint objects as TEI's HTTP routes.

- ``proto/tei.proto``: the interface, TEI's services, messages and field numbers;
- ``stubs/``: the messages and services generated from it when the package is built;
- ``messages.py``: a message as the HTTP route's body, an endpoint's answer as a response;
- ``calls.py``: each call's envelope (key, model, deadline, status, metrics);
- ``statuses.py``: errors as the gRPC status codes TEI answers with;
- ``streams.py``: the ``*Stream`` methods' ordered, bounded answering;
- ``services.py``: the five services; ``server.py``: the server, health and reflection.
"""
