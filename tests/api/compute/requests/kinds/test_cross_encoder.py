"""A cross-encoder's scores as each request wants them: with the model's activation (as
``CrossEncoder.predict``), the logits, or TEI's probabilities (a softmax over the labels, a
sigmoid for one, whatever the model's activation); an LLM reranker's pairs through its chat
template, the prompt its system message."""

import numpy as np
import pytest

from embedgate.api.compute.requests.asks import Ask, Output, Scores
from embedgate.api.compute.requests.kinds import kind_of
from embedgate.api.compute.requests.prompts import PromptChoice
from embedgate.api.errors import InvalidInput
from embedgate.contract.kinds.cross_encoder import ChatTemplate, CrossEncoderInfo, Rendering
from embedgate.contract.preprocess.chat_pairs import ChatPairTokenizer, PromptedPair
from tests.api.conftest import FakeModel, fake_metadata

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


CHAT = ChatTemplate(
    plain=Rendering(segments=["<q>", "<d>", "<end>"], slots=["query", "document"]),
    prompted=Rendering(segments=["<p>", "<q>", "<d>", "<end>"], slots=["prompt", "query", "document"]),
)


def llm_reranker(**changes):
    info = CrossEncoderInfo(num_labels=1, activation=SIGMOID, token_type_ids=False, logits=True, chat_template=CHAT)
    return FakeModel("org/llm", changes={"kind": "cross_encoder", "embedding_dim": 1, "cross_encoder": info,
                                         "prompts": {"web": "Find web pages"}, **changes})


def test_a_chat_template_models_pairs_carry_the_prompt_as_its_system_message():
    model = llm_reranker()
    plan = model.kind.plan(model, Ask(Output.RERANK, ["d1", "d2"], PromptChoice(prompt_name="web"), query="q"))
    (run,) = plan.runs
    # Not before the query, as a text pair's prompt: its template renders it.
    assert run.inputs == [PromptedPair("q", "d1", "Find web pages"), PromptedPair("q", "d2", "Find web pages")]
    assert run.prefix == ""
    plain = model.kind.plan(model, Ask(Output.PREDICT, [("q", "d")]))
    assert plain.runs[0].inputs == [PromptedPair("q", "d", "")]


def test_a_chat_template_model_refuses_a_single_text_saying_why():
    model = llm_reranker()
    with pytest.raises(InvalidInput, match="pairs through its chat template"):
        model.kind.plan(model, Ask(Output.PREDICT, ["a text alone", ("q", "d")]))


def test_a_chat_template_model_tokenizes_through_its_template(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    backend = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    (tmp_path / "tokenizer").mkdir()
    backend.save(str(tmp_path / "tokenizer" / "tokenizer.json"))
    tokenizer = llm_reranker().kind.tokenizer(lambda part: tmp_path, "org--llm")
    assert isinstance(tokenizer, ChatPairTokenizer)
    assert tokenizer.render(PromptedPair("q", "d", "p")) == "<p>p<q>q<d>d<end>"
