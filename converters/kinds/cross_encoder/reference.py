"""What a cross-encoder's library gives, for the parity check: each input's tokens as the
model's own preprocessing makes them, ``CrossEncoder.predict``'s scores, and what the
gateway must know of its activation and labels."""

from __future__ import annotations

import numpy as np

from embedgate.contract.errors import UnsupportedModelError
from embedgate.contract.spec import ATTENTION_MASK, GATEWAY_ACTIVATIONS, INPUT_IDS, TOKEN_TYPE_IDS
from embedgate.converters.library import parity


def tokens(model, inputs: list, token_type_ids: bool, prompt: str | None = None):
    """Each input's token ids (and type ids) as the model's own preprocessing makes them,
    with ``prompt`` as ``predict(prompt=...)`` gives it."""
    ids, types = [], []
    for item in inputs:
        features = model.preprocess([list(item)] if isinstance(item, tuple) else [item], prompt=prompt)
        mask = features[ATTENTION_MASK].numpy()
        ids += parity.reference_token_ids(features[INPUT_IDS].numpy(), mask)
        if token_type_ids:
            types += parity.reference_token_ids(features[TOKEN_TYPE_IDS].numpy(), mask)
    return ids, (types if token_type_ids else None)


def predict(model, inputs: list, activation, labels: int) -> np.ndarray:
    """``CrossEncoder.predict`` of each input ([inputs, labels]): pairs together, a single
    text alone (``predict`` takes one text by itself). A model the library itself cannot
    score so (a decoder without a padding token, for one) is refused with its reason."""
    pairs = [list(item) for item in inputs if isinstance(item, tuple)]
    try:
        scores = list(model.predict(pairs, prompt="", activation_fn=activation, convert_to_numpy=True, batch_size=8))
        rows = iter(scores)
        out = [
            next(rows) if isinstance(item, tuple)
            else model.predict(item, prompt="", activation_fn=activation, convert_to_numpy=True)
            for item in inputs
        ]
    except (ValueError, IndexError, TypeError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UnsupportedModelError(
            f"unsupported cross-encoder: sentence-transformers cannot score batches of pairs with it ({first_line[:300]})"
        ) from error
    return np.asarray(out, dtype=np.float32).reshape(len(inputs), labels)


def gateway_applies(activation) -> bool:
    """Whether the gateway applies ``activation`` to the logits (else it stays in the graph):
    one of the contract's, and a softmax over an input's own labels."""
    if qualified_name(activation) not in GATEWAY_ACTIVATIONS:
        return False
    return type(activation).__name__ != "Softmax" or getattr(activation, "dim", None) in (None, 1, -1)


def labels(config, count: int) -> list[str]:
    names = getattr(config, "id2label", None) or {}
    return [str(names.get(index, names.get(str(index), f"LABEL_{index}"))) for index in range(count)]


def qualified_name(activation) -> str:
    if activation is None:
        return "none"
    cls = activation if isinstance(activation, type) else type(activation)
    return f"{cls.__module__}.{cls.__qualname__}"


def pad_token_id(transformer) -> int | None:
    """The id the model's tokenizer pads with, where the graph must see it instead of the
    gateway's 0 (a decoder's classification head scores the last token that is not padding,
    told by its id); None where padding is 0 already, or the tokenizer has none."""
    pad = getattr(transformer.tokenizer, "pad_token_id", None)
    return None if pad in (None, 0) else int(pad)
