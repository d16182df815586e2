"""Each kind answers its own outputs and refuses the others, saying where to go; chunks
are planned for dense embeddings of texts through a text tokenizer, and late chunks by the
kinds that pool them."""

import numpy as np
import pytest

from embedgate.api.compute.requests.asks import Ask, Output, Plan, Run
from embedgate.api.compute.requests.chunking import Chunking
from embedgate.api.compute.requests.kinds import KINDS, kind_of
from embedgate.api.compute.requests.routes import EVERY_TASK, Route
from embedgate.api.errors import InvalidOption, ModelConflict, WrongModelKind
from embedgate.contract.kinds.cross_encoder import CrossEncoderInfo
from embedgate.contract.preprocess.text import TextTokenizer
from tests.api.conftest import FakeModel, fake_metadata


@pytest.mark.parametrize(
    "kind, output, pointer",
    [
        ("cross_encoder", Output.EMBED, "POST /rerank or /v1/rerank"),
        ("sentence_transformer", Output.RERANK, "POST /infer or /v1/embeddings"),
        ("sparse_encoder", Output.EMBED, "POST /infer (sparse_embeddings)"),
        ("sentence_transformer", Output.IMAGES, "dense embeddings of texts"),
        ("multi_vector_encoder", Output.EMBED, "POST /infer (multi_vector_embeddings)"),
        ("sentence_transformer", Output.PREDICT, "POST /infer or /v1/embeddings"),
    ],
)
def test_an_output_the_kind_does_not_give_is_refused_with_what_it_gives(kind, output, pointer):
    served = kind_of(fake_metadata("org/model", kind=kind))
    with pytest.raises(WrongModelKind, match="model 'org/model' is ") as refused:
        served.require(output, "org/model")
    assert output.value in str(refused.value) and pointer in str(refused.value)
    assert refused.value.code == "wrong_model_kind"


def test_every_output_is_given_by_some_kind_and_every_kind_gives_one():
    assert set().union(*(kind.outputs for kind in KINDS.values())) == set(Output)
    assert all(kind.outputs for kind in KINDS.values())
    for name, kind in KINDS.items():
        assert kind.name == name
        served = kind(fake_metadata("m", kind=name))
        for output in served.gives():
            served.require(output, "m")  # answers its own


def test_a_classifier_predicts_and_only_a_one_label_cross_encoder_reranks():
    def info(labels):
        return CrossEncoderInfo(num_labels=labels, activation="torch.nn.modules.linear.Identity", token_type_ids=False)

    reranker = kind_of(fake_metadata("m", kind="cross_encoder", record=info(1)))
    classifier = kind_of(fake_metadata("m", kind="cross_encoder", embedding_dim=3, record=info(3)))
    assert reranker.gives() == {Output.RERANK, Output.PREDICT}
    assert classifier.gives() == {Output.PREDICT}
    with pytest.raises(WrongModelKind, match="POST /predict"):
        classifier.require(Output.RERANK, "m")
    assert classifier.labels() == ["LABEL_0", "LABEL_1", "LABEL_2"]


def test_a_kind_this_gateway_does_not_know_is_refused_as_another_versions():
    with pytest.raises(ModelConflict, match="another embedgate version"):
        kind_of(fake_metadata("m", kind="hologram"))


def test_dimensions_cut_then_normalize_as_encode_does():
    from types import SimpleNamespace

    from embedgate.api.compute.requests.kinds.dense import dense

    model = SimpleNamespace(metadata=SimpleNamespace(normalized=False, calibration=None))
    vectors = np.array([[3.0, 4.0, 12.0]], dtype=np.float32)
    cut = dense(model, vectors, normalize=True, precision="float32", dimensions=2)
    np.testing.assert_allclose(cut, [[0.6, 0.8]])
    raw = dense(model, vectors, normalize=False, precision="float32", dimensions=2)
    assert raw.tolist() == [[3.0, 4.0]] and raw.flags.c_contiguous
    np.testing.assert_allclose(dense(model, vectors, normalize=False, precision="float32"), vectors)


def test_only_dense_embeddings_of_texts_through_a_text_tokenizer_are_chunked(minilm_path):
    chunking = Chunking(8, 2)
    route = Route("", EVERY_TASK, TextTokenizer(f"{minilm_path}/tokenizer.json", 32), "part")
    plan = Plan([Run(route, ["a text"], "query: ")])
    model = FakeModel("org/minilm", changes={"max_seq_length": 32})
    kind = model.kind

    assert kind.chunked(model, Ask(Output.EMBED, ["a text"], chunking=chunking), plan).chunking == chunking
    with pytest.raises(InvalidOption, match="chunking is for dense embeddings of texts") as sparse:
        kind.chunked(model, Ask(Output.SPARSE, ["a text"], chunking=chunking), plan)
    assert sparse.value.param == "chunking"
    other = Plan([Run(Route("", EVERY_TASK, object(), "part"), ["a text"])])  # a CLIP tower's tokenizer, say
    with pytest.raises(InvalidOption, match="chunking"):
        kind.chunked(model, Ask(Output.EMBED, ["a text"], chunking=chunking), other)
    # Late chunks are the kinds' that pool them.
    multimodal = FakeModel("org/mm", changes={"kind": "multimodal"})
    late = Ask(Output.EMBED, ["a text"], chunking=Chunking(8, late=True))
    with pytest.raises(InvalidOption, match="late chunking pools a sentence-transformer's token vectors") as refused:
        multimodal.kind.late(multimodal, plan, late.chunking)
    assert refused.value.param == "chunking"


def test_a_graph_is_sent_only_the_inputs_its_conversion_recorded():
    tensors = {name: np.zeros((1, 2), dtype=np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}
    recorded = kind_of(fake_metadata("org/model", graph_inputs={"org--model": ["input_ids", "attention_mask"]}))
    assert list(recorded.fed("org--model", tensors)) == ["input_ids", "attention_mask"]
    # A part with nothing recorded (converted before the record) is sent what the kind gives.
    assert recorded.fed("org--other", tensors) is tensors
    assert kind_of(fake_metadata("org/model")).fed("org--model", tensors) is tensors
