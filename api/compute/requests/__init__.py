"""What a request means: what it asks of a model (``asks.py``), the prompt and route its
texts take (``prompts.py``, ``routes.py``), the plan each model kind makes of it
(``kinds/``), how texts are cut into chunks of the model's tokens (``chunking.py``), and
how the outputs become its answer (precisions, activations, late interaction, results). No
scheduling and no I/O here."""
