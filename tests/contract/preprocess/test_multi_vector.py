"""A multi-vector model's texts tokenized per task as MultiVectorEncoder prepares them: the
ids and attention mask its Transformer gets, and the positions MultiVectorMask keeps."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.contract.kinds.multi_vector import MultiVectorTask, QueryExpansion
from embedgate.contract.preprocess.multi_vector import MultiVectorTokenizer
from tests import tiny_models

TEXTS = ["[Q] which fox jumps, quickly?", "a", "[D] " + " ".join(["the lazy dog. the fox!"] * 20)]


@pytest.fixture(scope="module", params=[False, True], ids=["not attending", "attending"])
def model(request, tmp_path_factory):
    from sentence_transformers import MultiVectorEncoder

    directory = tiny_models.multi_vector_model(tmp_path_factory.mktemp("mve") / "model", attend=request.param)
    return MultiVectorEncoder(str(directory), device="cpu"), directory, request.param


def tasks(model, attend: bool) -> dict:
    skiplist = sorted(model[2]._skiplist_ids.tolist())
    expansion = QueryExpansion(
        strategy="fixed", attend=attend, token_id=model.tokenizer.mask_token_id, length=tiny_models.QUERY_EXPANSION
    )
    return {
        "query": MultiVectorTask(max_length=tiny_models.QUERY_EXPANSION, expansion=expansion),
        "document": MultiVectorTask(max_length=48, skiplist=skiplist),
        None: MultiVectorTask(max_length=tiny_models.MAX_SEQ_LENGTH, skiplist=skiplist),
    }


@pytest.mark.parametrize("task", ["query", "document", None])
def test_each_task_as_the_library_prepares_and_masks_it(model, task):
    library, directory, attend = model
    tokenizer = MultiVectorTokenizer(directory / "tokenizer.json", tasks(library, attend)[task])
    ours = tokenizer.encode(TEXTS)
    features = library.preprocess(TEXTS, task=task)
    np.testing.assert_array_equal(ours.input_ids, features["input_ids"].numpy())
    np.testing.assert_array_equal(ours.attention_mask, features["attention_mask"].numpy())
    masked = library[2](dict(features), task=task)["attention_mask"].numpy()
    np.testing.assert_array_equal(ours.scored, masked)
    assert ours.truncated_rows == [False, False, True]
    if task == "query":
        # Every query reaches the expansion length, whatever its own length.
        assert ours.token_counts == [tiny_models.QUERY_EXPANSION] * 3
