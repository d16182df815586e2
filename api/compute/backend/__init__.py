"""The seam between scheduling and what runs the model: a :class:`~.base.Backend` takes a
Triton model's input tensors and gives its output; Triton (with the rules for sending a
call again when Triton or a stub dies under it), or no model at all for measuring the
server's own cost."""
