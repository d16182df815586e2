"""Inputs to tensors, torch-free: text tokenizers (a text per row, pairs, a multi-vector
model's markers), OpenCLIP's tokenizers, image decoding and resizing. The gateway runs
them per request; the converters' parity check runs the same code."""
