"""A multimodal sentence-transformer: its text graph and its image graph, each converted
and checked against the library on its own (``converter.py``), its modalities and image
processor read as what the gateway can replay, or refused (``modalities.py``,
``processor.py``), its image graph (``image_graph.py``)."""
