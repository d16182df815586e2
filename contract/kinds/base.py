"""What a model kind is to both sides: its declaration (:class:`Kind`), which the kind's
own module in this package makes, and the base of the record ``metadata.json`` keeps of
what is the kind's own (:class:`KindRecord`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from pydantic import BaseModel


class KindRecord(BaseModel):
    """What ``metadata.json`` records of one kind's own (``ModelMetadata.record``): a
    cross-encoder's labels, an OpenCLIP model's tokenizer and image preprocessing..."""

    # The key metadata.json keeps it under ("cross_encoder", "clip"...).
    key: ClassVar[str]

    def pretrained_tag(self) -> str | None:
        """What a load names a model of this kind by besides its model_name (OpenCLIP's
        pretrained); None for the kinds a model name alone names."""
        return None


def one_part(triton_name: str) -> tuple[str, ...]:
    """A model that is one Triton model, named as the model is."""
    return (triton_name,)


@dataclass(frozen=True)
class Kind:
    """What the converter of a kind and the gateway's served kind must agree on."""

    # metadata.json's kind, and the answers' ("kind" in a load's answer and the listings).
    name: str
    # What metadata.json records of the kind's own (None: nothing of its own).
    record: type[KindRecord] | None = None
    # The library a load names (ConversionSpec.library).
    library: str = "sentence_transformers"
    # The library's class a directory declares itself to be (config_sentence_transformers.json's
    # model_type), which its converter loads it as; None where the library has one kind (OpenCLIP).
    library_class: str | None = None
    # Whether its models have prompts. Where not, metadata.json's prompts read as none ({})
    # rather than unknown (None: converted before prompts were recorded).
    prompts: bool = True
    # Whether its models take images beside texts, through one Transformer's processor. A
    # directory of its library class whose Transformer names modalities other than text
    # (converters/library/declared.py) is converted by this kind's converter; the class's
    # text-only kind converts the others.
    takes_images: bool = False
    # Whether its Transformer takes every input as chat messages (the ``message`` modality:
    # a vision-language model); such a directory is converted by this kind's converter.
    renders_messages: bool = False
    # The Triton models (repository entries) a model of this kind may be published as, from
    # its Triton name, the first first (published last, deleted first: it holds the tokenizer
    # and makes the model visible): those its record may add besides (a dense model's
    # late-chunking graph) too. Which of them one model has, its metadata says (the served
    # kind's ``parts``); these are what a delete removes and a conversion replaces.
    part_names: Callable[[str], tuple[str, ...]] = one_part
