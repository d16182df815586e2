"""A vision-language sentence-transformer (a Qwen2-VL-style model whose processor renders
every input through a chat template): its vision and language graphs (``graphs.py``),
converted and checked against the library together (``converter.py``)."""
