"""What a multimodal Transformer takes, and whether the gateway can serve each of it exactly.

sentence-transformers 6 hands every input of a multimodal ``Transformer`` to its processor
by modality (``modality_config``): a text to the tokenizer, then one method of the model
(``get_text_features``); an image to the image processor, then another
(``get_image_features``). Each such modality is a graph of its own, fed what the gateway
prepares. What is refused, and why:

- ``message``: the inputs go through the processor's chat template, where an image becomes
  a run of image tokens inside the text and the language model places them by positions of
  its own (vision-language embedders): the vision-language kind converts such a model
  (``converters/kinds/vision_language/``), not this one;
- audio and video: not served;
- a combination (``image+text``: one embedding of a text and an image together, BLIP's
  ``get_multimodal_features``): no graph here computes one;
- a model that does not take both texts and images.
"""

from __future__ import annotations

from collections.abc import Hashable

# What the gateway serves: each of these on its own.
SERVED = ("text", "image")
VISION_LANGUAGE = (
    "its inputs go through its processor's chat template as messages, where an image becomes image tokens "
    "inside the text (a vision-language embedder): it is converted as a vision-language model, whose graphs "
    "take those tokens, not as one that embeds texts and images each through a method of its own (CLIP, SigLIP)"
)


def name(modality: Hashable) -> str:
    """A modality as sentence-transformers writes it: ``text``, or ``image+text``."""
    return "+".join(modality) if isinstance(modality, tuple) else str(modality)


def modalities(transformer) -> list[str]:
    """What ``transformer`` (a sentence-transformers Transformer) takes, by name."""
    return [name(modality) for modality in transformer.modality_config]


def refusal(transformer) -> str | None:
    """Why the gateway cannot serve what ``transformer`` takes exactly, or None."""
    taken = modalities(transformer)
    if "message" in taken:
        return VISION_LANGUAGE
    media = sorted({part for modality in taken for part in modality.split("+")} - set(SERVED))
    if media:
        return f"it takes {' and '.join(media)} ({', '.join(taken)}), which embedgate does not serve"
    combined = [modality for modality in taken if "+" in modality]
    if combined:
        return (
            f"it embeds {', '.join(combined)} inputs together (one embedding of a text and an image), "
            "which embedgate does not serve"
        )
    missing = [modality for modality in SERVED if modality not in taken]
    if missing:
        return f"it takes {', '.join(taken)} but not {' or '.join(missing)}; embedgate serves models that take both"
    return None
