"""What the converters write and the gateway reads, imported by both (neither imports the
other): the conversion spec and ``metadata.json`` (``spec.py``, ``metadata_parts.py``),
each model kind's declaration and what it records of its own (``kinds/``), the model
repository, local or S3, and its atomic publish (``repository/``), a
conversion's failures and their exit codes (``errors.py``), and the torch-free
preprocessing both replay (``preprocess/``: what the parity check ran is what serves)."""
