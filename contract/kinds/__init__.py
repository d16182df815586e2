"""Each model kind's declaration, one module per kind (``contract/kinds/<kind>.py``): what
the converter that publishes a model of the kind and the gateway that serves it agree on,
its name in ``metadata.json``, the library class it comes from and the record it keeps
there of its own (:class:`base.Kind`). Torch-free: the gateway imports it.

The kinds are found, not listed: a module here that declares a ``KIND`` is one. Each side
finds its own the same way (``converters/kinds/``, ``api/compute/requests/kinds/``); a test
keeps the three registries' kinds in step.
"""

from __future__ import annotations

from embedgate.contract.kinds import discovery
from embedgate.contract.kinds.base import Kind, KindRecord

__all__ = ["KINDS", "RECORDS", "Kind", "KindRecord", "every_part", "first_parts"]


def _declared() -> dict[str, Kind]:
    kinds: dict[str, Kind] = {}
    for module in discovery.modules(__name__, __path__):
        kind = getattr(module, "KIND", None)
        if isinstance(kind, Kind):
            if kind.name in kinds:
                raise RuntimeError(f"{module.__name__}: the kind {kind.name!r} is declared twice")
            kinds[kind.name] = kind
    return kinds


# metadata.json's kind -> its declaration.
KINDS: dict[str, Kind] = _declared()
# metadata.json's key of each kind's record -> its class.
RECORDS: dict[str, type[KindRecord]] = {kind.record.key: kind.record for kind in KINDS.values() if kind.record}


def first_parts(library: str, triton_name: str) -> tuple[str, ...]:
    """The Triton models every model of ``library`` named ``triton_name`` is published as,
    whatever its kind (a sentence-transformer's graph, an OpenCLIP model's two towers): the
    parts its kinds all declare, in their order."""
    declared = [kind.part_names(triton_name) for kind in KINDS.values() if kind.library == library]
    return tuple(part for part in declared[0] if all(part in parts for parts in declared))


def every_part(library: str, triton_name: str) -> tuple[str, ...]:
    """Every Triton model a model of ``library`` named ``triton_name`` may be published as,
    whatever its kind, the first first: what a delete removes (a half-published model's
    parts too, whose kind nothing says) and a conversion replaces."""
    first = first_parts(library, triton_name)
    others = (part for kind in KINDS.values() if kind.library == library for part in kind.part_names(triton_name))
    return tuple(dict.fromkeys((*first, *others)))
