"""Turning request inputs into tensors, off the event loop."""
