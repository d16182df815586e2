"""A ``SentenceTransformer``'s converter, with what only dense models get: the packed graph
for short texts and the load-time variants."""
