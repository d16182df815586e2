"""A Pooling that leaves the prompt's tokens out (``include_prompt=False``): the graph pools
around the tokens the gateway marks, checked against ``encode(prompt=...)`` with the
gateway's own tokenizer; the packed graph is not built; what cannot be served so is refused."""

from __future__ import annotations

import pytest

from embedgate.contract.errors import ParityError
from embedgate.contract.kinds.dense import DenseInfo
from embedgate.contract.spec import ModelMetadata
from embedgate.converters.kinds.dense import prompt_exclusion
from embedgate.converters.library import parity
from embedgate.converters.library.routes import ModuleRoute
from tests import prompt_models
from tests.converters.conftest import run_converter


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("left-out")
    model = prompt_models.prompts_left_out_model(root / "model")
    run = run_converter({"model_name": "org/instructor", "model_path": str(model), "triton_name": "org--instructor",
                         "repository": str(root / "repository")})
    assert run.returncode == 0, run.stderr[-3000:]
    return model, ModelMetadata.model_validate(run.last_line), root / "repository" / "org--instructor"


def test_its_prompts_and_default_are_served_with_the_tokenizers_special_ids(converted):
    _, metadata, published = converted
    assert metadata.prompts_refused is None and metadata.default_prompt_name == "query"
    exclusion = metadata.record_of(DenseInfo).prompt_exclusion
    assert exclusion.special_ids == [0, 1, 2, 3, 4]  # [PAD] [UNK] [CLS] [SEP] [MASK]
    # The model's two prompts, two of the check's own and one past the max length, on 12 sentences.
    assert exclusion.parity.passed and exclusion.parity.sentences == 5 * 12
    # model.py packs a text's tokens from its first: no packed graph.
    assert metadata.packed_parity is None and not (published / "1" / "model.packed.onnx").exists()


def test_the_check_fails_where_the_prompts_tokens_are_miscounted(converted):
    from sentence_transformers import SentenceTransformer

    model, metadata, published = converted
    library = SentenceTransformer(str(model), device="cpu")
    run = parity.onnx_runner(published / "1" / "model.onnx")
    tokenizer_file = published / "tokenizer" / "tokenizer.json"
    # Without the special ids, a prompt's trailing [SEP] counts as the prompt's: one token too many.
    with pytest.raises(ParityError, match="prompts left out of pooling"):
        prompt_exclusion.check(library, run, tokenizer_file, 64, False, [], metadata.prompts.values(), 0.9999)


class Pooling:
    include_prompt = False

    def __init__(self, mode):
        self.pooling_mode = mode


def test_a_router_or_weighted_mean_pooling_refuses_prompts_left_out():
    assert prompt_exclusion.refusal([ModuleRoute("", ("default",), ("transformer", Pooling("mean")))]) is None
    assert prompt_exclusion.refusal([ModuleRoute("", ("default",), ("transformer", Pooling(("cls", "max"))))]) is None
    assert "without a Router" in prompt_exclusion.refusal([ModuleRoute("query", ("query",), ("transformer", Pooling("mean")))])
    assert "weightedmean" in prompt_exclusion.refusal([ModuleRoute("", ("default",), ("transformer", Pooling("weightedmean")))])


def test_the_gpu_graph_pools_around_the_marks_too(converted, tmp_path):
    """GPU instances run the module stack traced with TorchScript (library/gpu.py): traced on
    unmarked texts, it reads the marks of prompted ones. Traced here on the CPU, as
    tests/converters/library/test_gpu.py does."""
    import torch
    from sentence_transformers import SentenceTransformer

    from embedgate.contract.spec import ATTENTION_MASK, INPUT_IDS
    from embedgate.converters.library import gpu

    model, metadata, published = converted
    library = SentenceTransformer(str(model), device="cpu").float().eval()
    torch_file = tmp_path / "model.pt"
    gpu.trace(library, library.preprocess(["a", "b c d"], prompt=""), torch_file, torch.float32, device="cpu")
    run = gpu.runner(torch_file, (INPUT_IDS, ATTENTION_MASK), "cpu")
    exclusion = metadata.record_of(DenseInfo).prompt_exclusion
    checked = prompt_exclusion.check(
        library, run, published / "tokenizer" / "tokenizer.json", 64, False, exclusion.special_ids,
        metadata.prompts.values(), 0.9999,
    )
    assert checked.parity.min_cosine >= 0.9999
