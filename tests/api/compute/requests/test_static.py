"""A route the gateway computes: the static weights of each token a text has, as
SparseStaticEmbedding computes them."""

from __future__ import annotations

import numpy as np

from embedgate.api.compute.requests.static import static_vectors


def test_the_stored_weight_of_each_token_a_text_has_once():
    import torch
    from sentence_transformers.sparse_encoder.models import SparseStaticEmbedding

    class Tokenizer:
        def get_vocab(self):
            return {str(i): i for i in range(10)}

        model_max_length = 16

    weights = torch.tensor([0.0, 1.5, 2.0, 0.0, 3.25, 1.0, 0.5, 4.0, 0.0, 2.5])
    module = SparseStaticEmbedding(Tokenizer(), weight=weights)
    input_ids = torch.tensor([[1, 4, 4, 7, 0], [2, 3, 0, 0, 0]])
    attention_mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    expected = module({"input_ids": input_ids, "attention_mask": attention_mask})["sentence_embedding"]
    ours = static_vectors(weights.numpy(), input_ids.numpy(), attention_mask.numpy())
    np.testing.assert_array_equal(ours, expected.detach().numpy())
