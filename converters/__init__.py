"""Turn PyTorch embedding models into Triton model directories (run as ``python -m converters``)."""
