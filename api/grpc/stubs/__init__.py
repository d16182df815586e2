"""TEI's gRPC messages and services (``tei_pb2``, ``tei_pb2_grpc``), generated from
``../proto/tei.proto`` with grpcio-tools when the package is built or installed
(``setup.py``); they are not kept in the repository."""
