"""The seam between the gateway and what runs the models: a :class:`~.base.Backend` loads a
model's parts, unloads them, says whether it is ready and what it ran, and runs a call (a
Triton model's input tensors in, its output out). Triton is one (``triton.py``, with the
rules for sending a call again when Triton or a stub dies under it, ``resend.py``); no
model at all is another (``noop.py``), for measuring the server's own cost."""
