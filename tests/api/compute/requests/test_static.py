"""A route the gateway computes: the static weights of each token a text has, as
SparseStaticEmbedding computes them."""

from __future__ import annotations

import numpy as np

from embedgate.api.compute.requests.static import MeanVectors, TokenWeights, static_vectors


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


def test_the_mean_of_each_texts_token_vectors_as_static_embedding_computes_it():
    import torch
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer, models

    vocabulary = {str(i): i for i in range(10)}
    module = StaticEmbedding(Tokenizer(models.WordLevel(vocabulary, unk_token="0")), embedding_dim=4)
    input_ids = np.array([[1, 4, 4, 7, 0], [2, 3, 0, 0, 0], [0, 0, 0, 0, 0]])
    attention_mask = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]])
    features = {"input_ids": torch.tensor([1, 4, 4, 7, 2, 3]), "offsets": torch.tensor([0, 4, 6])}
    with torch.no_grad():
        expected = module(features)["sentence_embedding"].numpy()
    vectors = module.embedding.weight.detach().numpy()
    ours = MeanVectors(vectors, normalize=False).vectors(input_ids, attention_mask)
    np.testing.assert_allclose(ours, expected, atol=1e-6)
    # Its first bag is the first text's tokens; the third text has none (zeros).
    assert not ours[2].any()
    # The sparse route's weights, through the same interface.
    weights = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(
        TokenWeights(weights).vectors(input_ids, attention_mask), static_vectors(weights, input_ids, attention_mask)
    )
