"""``embedgate serve --workers N``: N gateway processes behind one listening socket, one
primary process with one Triton and one model lifecycle (``primary.py``); each worker
serves the whole API (``worker.py``) and sees the server through its primary
(``cluster.py``)."""
