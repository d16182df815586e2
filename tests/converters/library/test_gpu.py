"""The GPU graph (converters/library/gpu.py): the module stack traced with TorchScript computes
what sentence-transformers computes, for shapes other than the one it was traced on. The
trace runs here on the CPU (the same code the converter runs on CUDA); the GPU itself is
exercised by tests/integration/test_gpu.py on a GPU host."""

from __future__ import annotations

import pytest

from embedgate.contract.errors import ConversionError
from embedgate.contract.spec import ATTENTION_MASK, INPUT_IDS
from embedgate.converters.library import gpu, parity
from tests import tiny_models


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tiny_models.dense_model(tmp_path_factory.mktemp("gpu") / "bert")), device="cpu")
    return model.float().eval()


def test_the_traced_stack_matches_sentence_transformers_on_other_shapes(tiny, tmp_path):
    import torch

    sentences = ["a", "embedding servers batch requests", "the quick brown fox jumps over the lazy dog " * 3]
    reference = tiny.encode(sentences, convert_to_numpy=True)
    torch_file = tmp_path / "model.pt"
    # Traced on two texts; run below on three, each alone and padded together.
    gpu.trace(tiny, tiny.preprocess(sentences[:2]), torch_file, torch.float32, device="cpu")
    features = tiny.preprocess(sentences)
    token_ids = parity.reference_token_ids(features[INPUT_IDS].numpy(), features[ATTENTION_MASK].numpy())

    result = parity.check_run(gpu.runner(torch_file, (INPUT_IDS, ATTENTION_MASK), "cpu"), token_ids, reference, 0.9999)

    assert result.passed and result.min_cosine >= 0.9999
    # The model the converter goes on with is untouched (still float32, on the CPU).
    assert next(tiny.parameters()).dtype == torch.float32 and next(tiny.parameters()).device.type == "cpu"


def test_without_cuda_the_gpu_graph_is_refused_with_the_reason(tiny, tmp_path, monkeypatch):
    import torch

    # Also on a host with CUDA: the converter's environment is made one without it.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConversionError, match="torch.cuda.is_available"):
        gpu.build(tiny, tiny.preprocess(["a", "b c"]), tmp_path, lambda run, half: None, lambda line: None)


def test_the_published_graph_falls_back_to_float32_where_float16_loses_parity(tiny, tmp_path):
    from embedgate.contract.errors import ParityError

    asked = []

    def check(run, half):
        asked.append(half)
        if half:
            raise ParityError("min cosine 0.99 < threshold 0.999")
        return parity.ParityResult(passed=True, threshold=0.9999, min_cosine=1.0, sentences=2)

    steps = []
    info = gpu.build(tiny, tiny.preprocess(["a", "b c"]), tmp_path, check, steps.append, device="cpu")

    assert asked == [True, False]
    assert info.dtype == "float32" and info.torch_bytes == (tmp_path / "model.pt").stat().st_size
    assert any("float16 graph refused" in line for line in steps)


def test_a_graph_losing_parity_in_float32_is_traced_again_with_eager_attention(tiny, tmp_path):
    """SDPA traced on CUDA has answered an input wrong where eager attention kept it: a
    float32 graph that loses parity is traced once more with eager attention, which is
    published if it keeps parity. The caller's model keeps its own attention."""
    import torch

    from embedgate.contract.errors import ParityError

    sentences = ["a", "embedding servers batch requests", "the quick brown fox jumps over the lazy dog " * 3]
    reference = tiny.encode(sentences, convert_to_numpy=True)
    features = tiny.preprocess(sentences)
    token_ids = parity.reference_token_ids(features[INPUT_IDS].numpy(), features[ATTENTION_MASK].numpy())
    graphs = []

    def check(run, half):
        graphs.append(str(torch.jit.load(str(tmp_path / "model.pt")).inlined_graph))
        if len(graphs) < 3:
            raise ParityError("a score differs by 8.65 > 0.0001")
        return parity.check_run(run, token_ids, reference, 0.9999)

    steps = []
    info = gpu.build(tiny, tiny.preprocess(sentences[:2]), tmp_path, check, steps.append, device="cpu")

    assert info.dtype == "float32" and info.parity.min_cosine >= 0.9999
    assert ["scaled_dot_product_attention" in graph for graph in graphs] == [True, True, False]
    assert any("float32 with eager attention" in line for line in steps)
    assert tiny[0].auto_model.config._attn_implementation == "sdpa"


def test_a_graph_with_no_other_attention_to_try_keeps_its_float32_failure(tmp_path):
    import torch

    from embedgate.contract.errors import ParityError

    asked = []

    def check(run, half):
        asked.append(half)
        raise ParityError("min cosine 0.9 < threshold 0.9999")

    steps = []
    with pytest.raises(ParityError, match="0.9 < threshold"):
        gpu.build_module(
            lambda dtype, device: torch.nn.Linear(4, 2).to(dtype=dtype, device=device), [torch.ones(2, 4)], tmp_path,
            check, steps.append, input_names=["x"], half=False, device="cpu",
        )
    assert asked == [False]  # float32 once: nothing in it attends otherwise
    assert "no model in it attends otherwise: the float32 graph's failure stands" in steps


def test_a_trace_that_does_not_run_is_refused_as_unsupported_with_the_way_out(tiny, tmp_path):
    from embedgate.contract.errors import UnsupportedModelError

    def check(run, half):
        raise RuntimeError("The following operation failed in the TorchScript interpreter.")

    with pytest.raises(UnsupportedModelError, match="EMBEDGATE_INSTANCE_KIND=cpu"):
        gpu.build(tiny, tiny.preprocess(["a", "b c"]), tmp_path, check, lambda line: None, device="cpu")


def test_a_routes_and_a_multi_vector_stack_trace_as_their_graphs(tmp_path):
    """A route's modules (a Router's query head) and a multi-vector model's token graph are
    traced as they are exported: the GPU graph of each route, of each token."""
    import numpy as np
    import torch
    from sentence_transformers import MultiVectorEncoder, SentenceTransformer

    from embedgate.converters.library.routes import routes

    routed = SentenceTransformer(str(tiny_models.routed_model(tmp_path / "routed")), device="cpu").eval()
    query = next(route for route in routes(routed) if route.name == "query")
    texts = ["a fox", "the quick brown fox jumps"]
    gpu.trace(query.modules, routed.preprocess(texts, task="query"), tmp_path / "query.pt", torch.float32,
              device="cpu", zero_token_types=True)
    features = routed.preprocess(texts, task="query")
    ours = gpu.runner(tmp_path / "query.pt", (INPUT_IDS, ATTENTION_MASK), "cpu")(
        {name: features[name].numpy() for name in (INPUT_IDS, ATTENTION_MASK)}
    )
    np.testing.assert_allclose(ours, routed.encode_query(texts, prompt=""), atol=1e-5)

    colbert = MultiVectorEncoder(str(tiny_models.multi_vector_model(tmp_path / "colbert")), device="cpu").eval()
    graph = [module for module in colbert if type(module).__name__ != "MultiVectorMask"]
    features = colbert.preprocess(texts)
    gpu.trace(graph, features, tmp_path / "tokens.pt", torch.float32, device="cpu", zero_token_types=True,
              output_key="token_embeddings")
    tokens = gpu.runner(tmp_path / "tokens.pt", (INPUT_IDS, ATTENTION_MASK), "cpu")(
        {name: features[name].numpy() for name in (INPUT_IDS, ATTENTION_MASK)}
    )
    expected = colbert.encode(texts, prompt="", convert_to_numpy=True)
    assert tokens.shape[:2] == tuple(features[INPUT_IDS].shape)
    for row, mask, want in zip(tokens, features[ATTENTION_MASK].numpy().astype(bool), expected):
        np.testing.assert_allclose(row[mask], want, atol=1e-5)


def test_both_clip_towers_trace_and_keep_parity_with_open_clip(tmp_path):
    """OpenCLIP towers on GPU instances: the text and image towers, each a module of its own,
    traced (on the CPU here) and checked by the CLIP parity checks on other batch sizes."""
    import torch

    from embedgate.contract.spec import PIXELS
    from embedgate.converters.kinds.clip import parity as clip_parity
    from embedgate.converters.kinds.clip.converter import image_preprocessing
    from embedgate.converters.kinds.clip.export import image_tower, text_tower
    from tests.clip_model import build_tiny_clip, reference_model

    model, preprocess, tokenizer = reference_model(build_tiny_clip(tmp_path / "clip"))
    sentences = ["a photo of a cat", "a diagram", "the quick brown fox " * 3]
    labels, images = zip(*clip_parity.parity_images())
    tokens = tokenizer(sentences)
    with torch.no_grad():
        text_reference = model.encode_text(tokens).float().numpy()
        image_reference = model.encode_image(torch.stack(clip_parity.reference_pixels(images, preprocess))).numpy()
    preprocessing = image_preprocessing(model)
    pixels = clip_parity.gateway_pixels(images, preprocessing)

    text = gpu.build_module(
        lambda dtype, device: text_tower(model, dtype, device), [tokens[:2]], tmp_path / "text",
        lambda run, half: clip_parity.check_text(run, tokens.numpy(), text_reference, 0.9999, sentences),
        lambda line: None, input_names=[INPUT_IDS], half=False, device="cpu",
    )
    image = gpu.build_module(
        lambda dtype, device: image_tower(model, preprocessing, dtype, device), [torch.from_numpy(pixels[:2])],
        tmp_path / "image",
        lambda run, half: clip_parity.check_images(run, pixels, image_reference, 0.9999, labels),
        lambda line: None, input_names=[PIXELS], half=False, device="cpu",
    )

    assert (text.dtype, image.dtype) == ("float32", "float32")
    assert text.parity.min_cosine >= 0.9999 and image.parity.images == len(images)
    # The caller's model is left in float32 on the CPU.
    assert next(model.parameters()).dtype == torch.float32


def test_a_decoders_classification_head_sees_its_own_padding_id_in_the_trace(tmp_path):
    """A head that scores the last token that is not padding, told by its id (Qwen3's): the
    gateway pads with 0, the traced graph puts the tokenizer's padding id there."""
    import torch
    from sentence_transformers import CrossEncoder

    from tests import llm_rerankers

    model = CrossEncoder(str(llm_rerankers.sequence_classification_reranker(tmp_path / "seq-cls")), device="cpu")
    pairs = [["what is the fox", "the quick brown fox jumps"], ["hello", "a man is eating food at the bank"]]
    expected = model.predict(pairs, activation_fn=torch.nn.Identity())
    ids = [model.preprocess([pair])["input_ids"][0].tolist() for pair in pairs]
    example = {name: torch.from_numpy(value) for name, value in parity.pad(ids).items()}
    pad = model[0].tokenizer.pad_token_id
    assert pad != 0
    torch_file = tmp_path / "model.pt"
    gpu.trace(model, example, torch_file, torch.float32, output_key="scores", pad_token_id=pad, device="cpu")
    run = gpu.runner(torch_file, (INPUT_IDS, ATTENTION_MASK), "cpu")
    assert parity.check_scores(run, ids, None, expected, 1e-4).max_abs_error <= 1e-4
