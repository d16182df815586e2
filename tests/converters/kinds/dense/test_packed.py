"""The packed graph's inputs and when a model can have one (the export itself is tested on
the real MiniLM in test_sentence_transformer.py)."""

import errno
import os

import numpy as np
import pytest

from embedgate.contract.spec import ATTENTION_MASK, EMBEDDING, INPUT_IDS
from embedgate.converters.kinds.dense import packed
from embedgate.converters.kinds.dense.packed import one_text_per_row, pack_in_order, packed_inputs, unsupported_reason


class Pooling:
    def __init__(self, mode: str = "mean"):
        self.mode = mode

    def get_config_dict(self):
        return {"pooling_mode": self.mode}


class Dense:
    pass


class Normalize:
    pass


class LayerNorm:
    pass


class AutoModel:
    def forward(self, input_ids=None, attention_mask=None, position_ids=None):
        return None


class OldAutoModel:
    def forward(self, input_ids=None, attention_mask=None):
        return None


class Transformer:
    def __init__(self, auto_model=None):
        self.auto_model = auto_model or AutoModel()


def test_mean_pooled_models_with_dense_and_normalize_can_be_packed():
    assert unsupported_reason([Transformer(), Pooling(), Dense(), Normalize()]) is None
    assert unsupported_reason([Transformer(), Pooling()]) is None


def test_other_models_are_refused_with_the_reason():
    assert "not the mean" in unsupported_reason([Transformer(), Pooling("cls"), Normalize()])
    assert "LayerNorm" in unsupported_reason([Transformer(), Pooling(), LayerNorm(), Normalize()])
    assert "position_ids" in unsupported_reason([Transformer(OldAutoModel()), Pooling()])
    assert "not Pooling" in unsupported_reason([Transformer(), Dense()])


def test_texts_are_laid_in_order_into_rows_that_fit():
    assert pack_in_order([5, 3, 4, 8, 1], 8) == [[0, 1], [2], [3], [4]]


def test_packed_inputs_point_each_text_at_its_own_tokens():
    token_ids = [[11, 12, 13], [21, 22], [31, 32, 33, 34]]
    rows = pack_in_order([len(ids) for ids in token_ids], 6)
    inputs = packed_inputs(token_ids, rows, 6)

    assert rows == [[0, 1], [2]]
    np.testing.assert_array_equal(inputs[INPUT_IDS], [[11, 12, 13, 21, 22, 0], [31, 32, 33, 34, 0, 0]])
    np.testing.assert_array_equal(inputs["position_ids"], [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 0]])
    np.testing.assert_array_equal(inputs["segment_ids"], [[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0]])
    flat = np.append(inputs[INPUT_IDS].ravel(), -1)  # the graph's extra zero row, past the end
    for text, ids in enumerate(token_ids):
        gathered = flat[inputs["token_index"][text]]
        assert list(gathered[: len(ids)]) == ids and (gathered[len(ids) :] == -1).all()


def right_padded(lengths: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    width = max(lengths)
    mask = (np.arange(width)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    return {INPUT_IDS: rng.integers(1, 50, size=mask.shape) * mask, ATTENTION_MASK: mask}


def test_one_text_per_row_feeds_the_packed_graph_what_model_py_feeds_it(load_python_model):
    """The converter's parity check runs the packed graph the way model.py runs a batch it
    does not pack (``_run_rows``): the two must stay the same."""
    feeds = right_padded([3, 5, 1])
    seen = {}

    class Session:
        def run(self, outputs, inputs):
            seen.update(inputs)
            return [np.zeros((len(inputs[INPUT_IDS]), 1))]

    model = load_python_model().TritonPythonModel()
    model.packed, model.length_input, model.outputs, model.session = True, ATTENTION_MASK, [EMBEDDING], Session()
    model._run_rows(dict(feeds))

    expected = one_text_per_row(feeds)
    assert seen.keys() == expected.keys()
    for name, values in expected.items():
        np.testing.assert_array_equal(seen[name], values, err_msg=name)
    np.testing.assert_array_equal(expected["position_ids"][1], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(expected["token_index"][2], [10, 15, 15, 15, 15])



def test_roberta_family_positions_start_past_the_padding_index():
    import transformers

    from embedgate.converters.kinds.dense.packed import position_offset

    small = {"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8}
    assert position_offset(transformers.XLMRobertaModel(transformers.XLMRobertaConfig(pad_token_id=1, **small))) == 2
    assert position_offset(transformers.MPNetModel(transformers.MPNetConfig(**small))) == 2
    assert position_offset(transformers.BertModel(transformers.BertConfig(**small))) == 0


class Config:
    def __init__(self, layer_types):
        self.layer_types = layer_types


def test_models_with_attention_layers_the_graph_cannot_mask_are_refused():
    modernbert = AutoModel()
    modernbert.config = Config(["full_attention", "sliding_attention", "sliding_attention"])
    assert unsupported_reason([Transformer(modernbert), Pooling()]) is None
    chunked = AutoModel()
    chunked.config = Config(["full_attention", "chunked_attention"])
    assert unsupported_reason([Transformer(chunked), Pooling()]) == "attention layers of kind chunked_attention"


def build_failing_with(monkeypatch, tmp_path, error: Exception):
    """``packed.build`` on a model that can be packed, its export failing with ``error``."""

    def export(graph, inputs, onnx_file):
        onnx_file.write_bytes(b"part of a graph")
        raise error

    monkeypatch.setattr(packed, "_graph", lambda model, needs_token_type_ids: None)
    monkeypatch.setattr(packed, "_export", export)
    token_ids = [[101, 7, 102], [101, 8, 9, 102], [101, 5, 102]]
    return packed.build(
        [Transformer(), Pooling()], False, tmp_path, token_ids, np.ones((3, 4), np.float32), 0.9999, 16
    )


def test_a_failed_export_leaves_the_plain_graph_to_serve_and_says_why(monkeypatch, tmp_path):
    result, why = build_failing_with(monkeypatch, tmp_path, RuntimeError("unsupported operator"))
    assert result is None and why == "no packed graph: RuntimeError: unsupported operator"
    assert not (tmp_path / packed.PACKED_ONNX_FILE).exists()


def test_a_full_disk_fails_the_conversion_rather_than_publish_it_without_its_packed_graph(monkeypatch, tmp_path):
    for number in (errno.ENOSPC, errno.EDQUOT):
        with pytest.raises(OSError) as raised:
            build_failing_with(monkeypatch, tmp_path, OSError(number, os.strerror(number)))
        assert raised.value.errno == number
        assert not (tmp_path / packed.PACKED_ONNX_FILE).exists()
