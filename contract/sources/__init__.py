"""What a conversion was made from, recorded in its ``metadata.json`` and computed again by
the gateway on a load to tell whether the model's source changed since: the record
(``record.py``), the fingerprint of the files that define a model (``fingerprint.py``) and
where a load's model is read from (``locate.py``). Torch-free: the gateway imports it."""

from embedgate.contract.sources.fingerprint import fingerprint
from embedgate.contract.sources.locate import (
    HUB_PRETRAINED_PREFIX,
    hub_cache_dir,
    hub_repo,
    hub_snapshot,
    made_from,
    packaged_model_dir,
)
from embedgate.contract.sources.record import ModelSource, SourceType

__all__ = [
    "HUB_PRETRAINED_PREFIX",
    "ModelSource",
    "SourceType",
    "fingerprint",
    "hub_cache_dir",
    "hub_repo",
    "hub_snapshot",
    "made_from",
    "packaged_model_dir",
]
