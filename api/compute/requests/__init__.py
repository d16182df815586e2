"""What a request means: what it asks of a model (``asks.py``), the prompt and route its
texts take (``prompts.py``, ``routes.py``), the plan each model kind makes of it
(``kinds/``) and the steps its runs go through (``steps.py``), how texts are cut into
chunks of the model's tokens (``chunking.py``), what inputs cost (``costs.py``), and how
the outputs become its answer (precisions, activations, late interaction, results). No
scheduling and no I/O here: a step asks the compute side for what it runs on."""
