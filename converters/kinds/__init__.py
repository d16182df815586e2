"""One converter per model kind, behind one interface (:class:`base.KindConverter`): a
module here, or a package whose modules share the work (``dense/``, ``sparse/``, ``clip/``).

A load names a library; for sentence-transformers the directory itself says which class it
is (``converters/library/declared.py``), and that class's converter runs (its multimodal
kind's, where its Transformer takes more than text), or the load is refused with the reason. The converters are found, not listed: a class here that names the kind it
converts (``kind``, the contract's declaration in ``contract/kinds/<kind>.py``, which gives
the library class it loads) is one. A new kind is a new module here, its declaration in the
contract and its served kind in the gateway (``api/compute/requests/kinds/``); a test keeps
the three registries' kinds in step.
"""

from __future__ import annotations

from embedgate.contract.errors import UnsupportedModelError
from embedgate.contract.kinds import discovery
from embedgate.contract.spec import ConversionSpec
from embedgate.converters.kinds.base import KindConverter, Step
from embedgate.converters.kinds.library import LibraryKind
from embedgate.converters.library import declared
from embedgate.converters.library.modalities import takes_media
from embedgate.converters.library.module_stack import resolve_source

# metadata.json's kind -> the converter of that kind.
CONVERTERS: dict[str, type[KindConverter]] = {
    converter.kind.name: converter
    for converter in discovery.classes(discovery.modules(__name__, __path__), KindConverter, "kind")
}
# sentence-transformers' model_type -> the converter of that kind (of its text-only models).
LIBRARY_KINDS: dict[str, type[LibraryKind]] = {
    converter.kind.library_class: converter
    for converter in CONVERTERS.values()
    if converter.kind.library_class is not None and issubclass(converter, LibraryKind) and not converter.kind.takes_images
}
# sentence-transformers' model_type -> the converter of its models whose Transformer takes
# images (or audio, video), where embedgate has one; of those that take every input as chat
# messages (vision-language models), where it has one.
MULTIMODAL_KINDS: dict[str, type[LibraryKind]] = {
    converter.kind.library_class: converter
    for converter in CONVERTERS.values()
    if converter.kind.library_class is not None and issubclass(converter, LibraryKind) and converter.kind.takes_images
    and not converter.kind.renders_messages
}
MESSAGE_KINDS: dict[str, type[LibraryKind]] = {
    converter.kind.library_class: converter
    for converter in CONVERTERS.values()
    if converter.kind.library_class is not None and issubclass(converter, LibraryKind)
    and converter.kind.renders_messages
}
# A library of one kind (OpenCLIP) -> its converter: a load that names it needs no directory's word.
ONE_KIND_LIBRARIES: dict[str, type[KindConverter]] = {
    converter.kind.library: converter for converter in CONVERTERS.values() if converter.kind.library_class is None
}
# Every kind a conversion may publish (metadata.json's kind).
KINDS: tuple[str, ...] = tuple(CONVERTERS)

__all__ = ["KINDS", "KindConverter", "converter_for"]


def converter_for(spec: ConversionSpec, step: Step) -> KindConverter:
    """The converter of the kind ``spec`` names (OpenCLIP) or its directory declares."""
    one_kind = ONE_KIND_LIBRARIES.get(spec.library)
    if one_kind is not None:
        return one_kind(spec, step)
    source = resolve_source(spec, step)
    found = declared.read_declared(declared.model_files(source.location))
    converter = LIBRARY_KINDS.get(found.kind)
    if converter is None:
        raise declared.unsupported(found, tuple(LIBRARY_KINDS))
    if takes_media(found.modalities):
        converter = (MESSAGE_KINDS if "message" in found.modalities else MULTIMODAL_KINDS).get(found.kind)
        if converter is None:
            raise UnsupportedModelError(
                f"the model is a {found.kind} whose Transformer takes {', '.join(found.modalities)} (per its "
                f"sentence_bert_config.json); embedgate serves inputs other than text for "
                f"{', '.join(MULTIMODAL_KINDS)} models only, and serving its texts alone would leave out what it takes"
            )
    declared.check_custom_modules(found, trust_remote_code=spec.trust_remote_code)
    declared.check_modeling_code(declared.model_files(source.location), trust_remote_code=spec.trust_remote_code)
    if spec.variant is not None and not converter.serves_variants:
        raise UnsupportedModelError(
            f"the model is a {found.kind} (per {found.evidence}); variants ('@{spec.variant}') are built "
            "for SentenceTransformer models only"
        )
    step(f"the model is a {found.kind} (per {found.evidence})")
    return converter(spec, step, source, found)
