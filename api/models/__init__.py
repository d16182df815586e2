"""Model lifecycle: which models exist and are loaded, conversion, names, progress."""
