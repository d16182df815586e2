"""The code that runs inside Triton, in the Python backend's stub processes: ``model.py``
(copied into each published model as ``<model>/1/model.py``), with ``batch_layout.py``
and ``torch_graphs.py`` copied beside it. It imports nothing of embedgate (the stub's
Python has only numpy, onnxruntime and, on a GPU, torch); the converters import
``torch_graphs`` to check a GPU graph as the instances run it."""
