"""Text tokenization for a multi-vector (late-interaction) model, one task at a time, as
``MultiVectorEncoder`` prepares its texts (``Transformer.preprocess`` and ``MultiVectorMask``):

- each task cuts its texts at its own length (``query_length``, ``document_length``, the
  model's max sequence length);
- a query with query expansion (ColBERT) is padded up to the expansion length with the
  expansion token (``[MASK]``), which the encoder attends to only where the model says so,
  and whose vectors are scored all the same;
- a text keeps the vectors of its tokens but those of the skiplist (punctuation, for
  documents in ColBERT) and, where the model names some, only those it keeps.

The batch says which positions each text keeps (``scored``); the encoder computes every
position and the gateway keeps those. The converter checks this very code against
``encode_query`` / ``encode_document`` / ``encode`` before the model is published.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from embedgate.contract.kinds.multi_vector import MultiVectorTask
from embedgate.contract.preprocess.text import TextTokenizer, TokenBatch, bucket_length


class MultiVectorTokenizer(TextTokenizer):
    def __init__(self, tokenizer_file: Path, task: MultiVectorTask, strip_whitespace: bool = False):
        super().__init__(tokenizer_file, task.max_length, strip_whitespace)
        self.task = task
        self._skip = np.asarray(task.skiplist, dtype=np.int64)
        self._keep = None if task.keep_only is None else np.asarray(task.keep_only, dtype=np.int64)

    def encode(self, texts: list[str], pad_to_bucket: bool = False) -> TokenBatch:
        encodings = self.encodings(texts)
        expansion = self.task.expansion
        lengths = [len(encoding.ids) for encoding in encodings]
        # A row reaches its expansion length, past its own tokens: the encoder computes those too.
        extents = [max(n, expansion.length) if expansion else n for n in lengths]
        width = max(extents)
        if pad_to_bucket:
            width = bucket_length(width, max(self.max_length, width))
        input_ids = np.zeros((len(texts), width), dtype=np.int64)
        attention_mask = np.zeros((len(texts), width), dtype=np.int64)
        counted = np.zeros((len(texts), width), dtype=bool)
        for row, (encoding, n, extent) in enumerate(zip(encodings, lengths, extents)):
            input_ids[row, :n] = encoding.ids
            attention_mask[row, :n] = 1
            counted[row, :extent] = True
            if expansion and extent > n:
                input_ids[row, n:extent] = expansion.token_id
                attention_mask[row, n:extent] = int(expansion.attend)
        scored = counted
        if self._skip.size:
            scored = scored & ~np.isin(input_ids, self._skip)
        if self._keep is not None:
            scored = scored & np.isin(input_ids, self._keep)
        return TokenBatch(input_ids, attention_mask, extents, [bool(e.overflowing) for e in encodings], scored=scored)
