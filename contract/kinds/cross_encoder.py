"""A ``CrossEncoder``: a score per text or (query, document) pair, a reranker's relevance
(one label) or a classifier's score per label."""

from __future__ import annotations

from pydantic import Field

from embedgate.contract.kinds.base import Kind, KindRecord


class CrossEncoderInfo(KindRecord):
    """A cross-encoder's graph: texts or (query, document) pairs in, ``num_labels`` values
    out: the logits (``logits``), to which the gateway applies the activation
    ``CrossEncoder.predict`` applies, or, for models converted before that and activations
    the gateway does not apply, the scores with the activation already inside."""

    key = "cross_encoder"

    num_labels: int = Field(ge=1)
    # The activation's class (torch.nn.Sigmoid for one label, unless the model names another).
    activation: str
    # The graph takes token_type_ids (BERT-style pairs: 0 for the query, 1 for the document).
    token_type_ids: bool
    # The graph's output is LOGITS (True) or SCORES (False: converted before, or an activation
    # the gateway does not apply; such a model gives no raw scores).
    logits: bool = False
    # Each label's name, by index (the model's id2label; "LABEL_<i>" where it names none).
    labels: list[str] = Field(default_factory=list)


KIND = Kind("cross_encoder", record=CrossEncoderInfo, library_class="CrossEncoder")
