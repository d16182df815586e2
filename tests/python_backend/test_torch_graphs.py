"""The CUDA graphs' buckets, and what padding a batch up to its bucket does to the answer
(on the CPU, where the same padding runs eagerly: ``tests/integration/test_gpu.py`` checks
the captured graphs on a GPU)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest

from embedgate.python_backend import torch_graphs
from embedgate.python_backend.torch_graphs import Buckets, parse_sizes


def test_sizes_are_read_sorted_without_repeats():
    assert parse_sizes("8, 1,4,4") == [1, 4, 8]
    assert parse_sizes("") == []


def test_a_batch_goes_to_the_smallest_bucket_that_holds_it():
    buckets = Buckets([1, 4, 16], [16, 32, 64], max_tokens=512)

    assert buckets.pick(1, 3) == (1, 16)
    assert buckets.pick(3, 17) == (4, 32)
    assert buckets.pick(16, 32) == (16, 32)
    # 16 rows of 64 tokens are past the token cap: no bucket.
    assert buckets.pick(9, 40) is None
    assert buckets.pick(1, 65) is None


def test_shapes_are_captured_largest_first_within_the_token_cap():
    shapes = Buckets([1, 4, 16], [16, 64], max_tokens=512).shapes()

    assert shapes[0] == (16, 16)
    assert (16, 64) not in shapes
    assert sorted(shapes) == [(1, 16), (1, 64), (4, 16), (4, 64), (16, 16)]
    assert Buckets([1, 8], []).shapes() == [(8, None), (1, None)]


def test_a_batch_beyond_every_bucket_runs_in_slices_of_about_equal_rows_that_fit_one():
    buckets = Buckets([1, 4, 16], [16, 64], max_tokens=512)

    assert buckets.slices(10, 12) == [(0, 10)]
    assert buckets.slices(40, 12) == [(0, 14), (14, 28), (28, 40)]
    # 64 tokens wide: at most 4 rows in a bucket.
    assert buckets.slices(10, 50) == [(0, 4), (4, 8), (8, 10)]
    assert all(buckets.pick(end - start, 50) for start, end in buckets.slices(10, 50))
    assert buckets.slices(2, 65) == []


@pytest.fixture
def mean_pool():
    """A TorchScript graph that pools token vectors under the mask, and one per token."""
    torch = pytest.importorskip("torch")
    table = torch.randn(50, 6, generator=torch.Generator().manual_seed(0))

    class Pool(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            mask = attention_mask.unsqueeze(-1).float()
            vectors = torch.tanh(table[input_ids] @ table[:6].T) * mask
            return vectors.sum(1) / mask.sum(1).clamp(min=1e-9)

    class PerToken(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return table[input_ids] * attention_mask.unsqueeze(-1).float()

    example = (torch.ones(2, 3, dtype=torch.int64), torch.ones(2, 3, dtype=torch.int64))
    return torch, torch.jit.trace(Pool(), example), torch.jit.trace(PerToken(), example)


def runner(torch, module, buckets):
    names = ["input_ids", "attention_mask"]
    run = torch_graphs.GraphRunner(
        torch, module, "cpu", names, [np.int64, np.int64], [[-1], [-1]], buckets, True, "attention_mask"
    )
    run.capture()
    return run


def ragged(rows, width, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, width + 1, size=rows)
    lengths[0] = width
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    return {"input_ids": rng.integers(1, 50, size=(rows, width)) * mask, "attention_mask": mask}


@pytest.mark.parametrize("rows, width", [(1, 1), (1, 16), (3, 17), (16, 64), (40, 12), (7, 50), (2, 80)])
def test_padding_up_to_the_bucket_answers_what_the_batch_alone_does(mean_pool, rows, width):
    torch, pool, per_token = mean_pool
    buckets = Buckets([1, 4, 16], [16, 32, 64], max_tokens=512)
    feeds = ragged(rows, width, seed=rows * 100 + width)

    for module in (pool, per_token):
        padded = runner(torch, module, buckets).run(feeds)
        with torch.inference_mode():
            alone = module(*[torch.from_numpy(feeds[name]) for name in ("input_ids", "attention_mask")]).numpy()
        assert padded.shape == alone.shape
        np.testing.assert_allclose(padded, alone, rtol=1e-5, atol=1e-6)


def test_without_buckets_batches_run_as_they_come(mean_pool):
    torch, pool, _ = mean_pool
    run = runner(torch, pool, Buckets([], []))
    assert run.captured == {} and not run.graphs
    feeds = ragged(5, 9, seed=1)
    assert run.run(feeds).shape == (5, 6)


def test_the_module_imports_nothing_beyond_numpy_torch_and_the_standard_library():
    # Copied beside model.py into Triton's stub, where the gateway's packages are absent.
    tree = ast.parse(Path(torch_graphs.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"numpy", "torch"} | set(sys.stdlib_module_names)
