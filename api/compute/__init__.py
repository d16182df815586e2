"""The compute path: texts or images in, vectors out (embedding service, batching policy,
coalescing, admission, preprocessing)."""
