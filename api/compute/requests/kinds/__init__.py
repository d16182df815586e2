"""One served kind per model kind, behind one interface (:class:`base.ServedKind`), one
module each (``api/compute/requests/kinds/<kind>.py``).

The kind of a model is what its conversion recorded (``metadata.json``'s ``kind``); the
converter of the same kind wrote it (``converters/kinds/``), and both take the kind's name
and record from its declaration in the contract (``contract/kinds/<kind>.py``). The served
kinds are found, not listed: a class here that names its kind (``name``) is one. This
registry is the gateway's one list of kinds: the schemas and the listings read it; a test
keeps it in step with the contract's and the converters'.
"""

from __future__ import annotations

from embedgate.contract.kinds import discovery
from embedgate.contract.spec import ModelMetadata

from ....errors import ModelConflict
from .base import ServedKind

KINDS: dict[str, type[ServedKind]] = {
    kind.name: kind for kind in discovery.classes(discovery.modules(__name__, __path__), ServedKind, "name")
}

__all__ = ["KINDS", "ServedKind", "kind_of"]


def kind_of(metadata: ModelMetadata) -> ServedKind:
    kind = KINDS.get(metadata.kind)
    if kind is None:
        raise ModelConflict(
            f"model '{metadata.model_name}' is of a kind this gateway does not serve ({metadata.kind!r}): "
            "it was converted by another embedgate version"
        )
    return kind(metadata)
