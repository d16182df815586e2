"""What the converters of sentence-transformers' model classes share: the kind a directory
declares, loading a model as that class, its routes, exporting a module stack, its prompts,
its tokenizer, the parity checks and the GPU graph."""
