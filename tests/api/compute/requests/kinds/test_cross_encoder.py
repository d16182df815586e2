"""A cross-encoder's scores as each request wants them: with the model's activation (as
``CrossEncoder.predict``), the logits, or TEI's probabilities (a softmax over the labels, a
sigmoid for one, whatever the model's activation)."""

import numpy as np
import pytest

from embedgate.api.compute.requests.asks import Scores
from embedgate.api.compute.requests.kinds import kind_of
from embedgate.api.errors import InvalidInput
from embedgate.contract.kinds.cross_encoder import CrossEncoderInfo
from tests.api.conftest import fake_metadata

IDENTITY = "torch.nn.modules.linear.Identity"
SIGMOID = "torch.nn.modules.activation.Sigmoid"
LOGITS = np.array([[2.0, -1.0, 0.5], [0.0, 0.0, 3.0]], dtype=np.float32)


def cross_encoder(labels: int, activation: str, logits: bool = True):
    info = CrossEncoderInfo(num_labels=labels, activation=activation, token_type_ids=False, logits=logits)
    return kind_of(fake_metadata("m", kind="cross_encoder", embedding_dim=labels, cross_encoder=info))


def test_teis_probabilities_are_a_softmax_over_several_labels_whatever_the_activation():
    classifier = cross_encoder(3, IDENTITY)
    np.testing.assert_array_equal(classifier.scores(LOGITS), LOGITS)  # predict's: Identity
    np.testing.assert_array_equal(classifier.scores(LOGITS, Scores.RAW), LOGITS)
    probabilities = classifier.scores(LOGITS, Scores.PROBABILITIES)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)
    expected = np.exp(LOGITS) / np.exp(LOGITS).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probabilities, expected, rtol=1e-6)


def test_teis_score_of_one_label_is_its_sigmoid():
    reranker = cross_encoder(1, IDENTITY)
    logits = np.array([[2.0], [-3.0]], dtype=np.float32)
    np.testing.assert_allclose(reranker.scores(logits, Scores.PROBABILITIES), 1 / (1 + np.exp(-logits)), rtol=1e-6)
    np.testing.assert_array_equal(reranker.scores(logits), logits)


def test_a_graph_with_its_activation_inside_gives_teis_scores_only_where_they_are_the_same():
    inside = cross_encoder(1, SIGMOID, logits=False)
    scores = np.array([[0.7]], dtype=np.float32)
    assert inside.scores(scores, Scores.PROBABILITIES) is scores
    with pytest.raises(InvalidInput, match="raw_scores"):
        inside.scores(scores, Scores.RAW)
    with pytest.raises(InvalidInput, match="load it again"):
        cross_encoder(3, IDENTITY, logits=False).scores(LOGITS, Scores.PROBABILITIES)
