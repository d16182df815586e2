"""embedgate: a FastAPI gateway over NVIDIA Triton for embedding models."""

__version__ = "0.1.0"
