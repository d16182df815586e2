"""A ``SparseEncoder``'s converter."""
