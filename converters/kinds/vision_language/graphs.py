"""A vision-language sentence-transformer's two graphs (a Qwen2-VL, Qwen2.5-VL or Qwen3-VL
model behind one ``Transformer`` whose processor renders every input through a chat
template, images as runs of image tokens inside the text):

- **vision**: one image's uint8 ``patches [patches, channels * p * p]``
  (``contract/preprocess/vision_language_images.py``), their ``position_ids [patches, 2]``
  and, where the model has them, its position grid's taps and weights (Qwen3-VL) and each
  patch's attention window (Qwen2.5-VL: the patches come window by window;
  ``vision_language_positions.py``) -> ``image_embeds [levels, tokens, hidden]``: a row per
  image token, then one per deepstack level (Qwen3-VL). Its first nodes are the
  processor's rescaling and normalization, in the form its torchvision backend computes
  them (``(x - mean / scale) / (std / scale)`` on float32), and the image repeated over the
  temporal patch, as the processor expands it. The library's vision tower splits its
  attention by each image's patch count read as Python values (``cu_seqlens.tolist()``),
  which a traced graph would freeze; one image per call needs no split, so the blocks run
  here over the tower's own modules with plain attention across the image's patches (or
  its windows).
- **language**: ``input_ids``, ``attention_mask``, the three rows of multimodal rotary
  positions ``position_ids [3, batch, length]`` and the batch's image rows ``image_embeds
  [levels, tokens, hidden]`` (no tokens for texts) -> the model's embedding: the token
  embeddings with the image rows put at the image tokens in order (an index gather: what
  the library's ``masked_scatter`` does), the deepstack levels added to the first language
  layers' hidden states there, the language model, then the modules after the Transformer
  (Pooling, Normalize...).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

from embedgate.contract.kinds.vision_language import (
    IMAGE_EMBEDS,
    INTERP_INDICES,
    INTERP_WEIGHTS,
    PATCHES,
    POSITION_IDS,
    WINDOW_IDS,
    Frame,
    MessageTemplate,
    PatchImages,
)
from embedgate.contract.preprocess.vision_language_text import PROMPT_MARK, TEXT_MARK
from embedgate.converters.library.module_stack import OPSET, export_failure, index_based_masks

INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
EMBEDDING = "embedding"
SENTENCE_EMBEDDING = "sentence_embedding"


def vision_graph(model, images: PatchImages):
    """``model``: the Transformer's model (``Qwen2VLModel``, ``Qwen3VLModel``). Its output is
    ``image_embeds [levels, tokens, hidden]``: the merged rows, then each deepstack level's
    (Qwen3-VL: rows merged from inner vision layers, added to the first language layers'
    hidden states at the image tokens)."""
    import sys

    import torch

    visual = model.visual
    apply_rotary = sys.modules[type(visual).__module__].apply_rotary_pos_emb_vision
    deepstack = list(getattr(visual, "deepstack_visual_indexes", None) or [])
    area = images.patch_size * images.patch_size
    # The inputs after the patches and their positions, where the model takes them.
    extra_names = [*vision_extras(model)]
    # Qwen2.5-VL: the layers that attend to the whole image; the others, within windows.
    whole = set(range(len(visual.blocks))) if not window_size(model) else set(visual.fullatt_block_indexes)

    class VisionGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.visual = visual
            mean, std = (torch.tensor(values, dtype=torch.float32).view(1, 3, 1, 1) for values in (images.mean, images.std))
            self.register_buffer("offset", mean / images.rescale)
            self.register_buffer("divisor", std / images.rescale)

        def forward(self, patches, position_ids, *extra):
            given = dict(zip(extra_names, extra))
            visual = self.visual
            count = patches.shape[0]
            values = (patches.to(torch.float32).reshape(count, 3, 1, area) - self.offset) / self.divisor
            values = values.expand(count, 3, images.temporal_patch_size, area).reshape(count, -1)
            hidden = visual.patch_embed(values.to(self.visual.patch_embed.proj.weight.dtype))
            if INTERP_INDICES in given:  # the learned position grid, resampled to this image's
                taps = visual.pos_embed(given[INTERP_INDICES]) * given[INTERP_WEIGHTS][:, :, None]
                hidden = hidden + taps.sum(1).to(hidden.dtype)
            # Patches of other windows (the gateway sent them window by window), where the layer attends within them.
            apart = given[WINDOW_IDS][:, None] != given[WINDOW_IDS][None, :] if WINDOW_IDS in given else None
            cos, sin = visual.rotary_pos_emb(hidden, position_ids)
            levels = []
            for number, block in enumerate(visual.blocks):
                attention = block.attn
                query, key, value = (
                    attention.qkv(block.norm1(hidden))
                    .reshape(count, 3, attention.num_heads, -1)
                    .permute(1, 0, 2, 3)
                    .unbind(0)
                )
                query, key = apply_rotary(query, key, cos, sin)
                query, key, value = (part.transpose(0, 1) for part in (query, key, value))
                scores = query @ key.transpose(1, 2) * attention.scaling
                if apart is not None and number not in whole:
                    scores = scores.masked_fill(apart, float("-inf"))
                weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
                attended = (weights.to(query.dtype) @ value).transpose(0, 1).reshape(count, -1)
                hidden = hidden + attention.proj(attended)
                hidden = hidden + block.mlp(block.norm2(hidden))
                if number in deepstack:
                    levels.append(visual.deepstack_merger_list[deepstack.index(number)](hidden))
            return torch.stack([visual.merger(hidden), *levels]).to(torch.float32)

    return VisionGraph().eval()


def vision_extras(model) -> tuple[str, ...]:
    """The vision graph's inputs after the patches and their positions, for ``model``."""
    names = (INTERP_INDICES, INTERP_WEIGHTS) if position_grid(model) else ()
    return names + ((WINDOW_IDS,) if window_size(model) else ())


def window_size(model) -> int:
    """The side, in pixels, of the windows some of ``model``'s vision layers attend within
    (0: none, or every layer attends to the whole image)."""
    visual = model.visual
    whole = getattr(visual, "fullatt_block_indexes", None)
    if whole is None or set(range(len(visual.blocks))) <= set(whole):
        return 0
    return int(visual.window_size)


def deepstack_levels(model) -> int:
    """How many deepstack levels ``model``'s vision tower gives (0: none)."""
    return len(getattr(model.visual, "deepstack_visual_indexes", None) or [])


def position_grid(model) -> int:
    """The side of ``model``'s learned vision position grid (0: none)."""
    return int(getattr(model.visual, "num_grid_per_side", 0) or 0)


def language_graph(model, after: Sequence, image_token_id: int):
    """``after``: the sentence-transformers modules that follow the Transformer. The batch's
    ``image_embeds [levels, tokens, hidden]``: level 0 put at the image tokens in order,
    the others (deepstack) added to the first language layers' hidden states there."""
    import torch

    levels = 1 + deepstack_levels(model)

    class LanguageGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.after = torch.nn.ModuleList(list(after))

        def forward(self, input_ids, attention_mask, position_ids, image_embeds):
            embeds = self.model.get_input_embeddings()(input_ids)
            is_image = input_ids == image_token_id
            # Each image token's row of image_embeds, counted from 1 (0: the zero row for the rest).
            index = torch.cumsum(is_image.reshape(-1).long(), 0).reshape(is_image.shape) * is_image.long()
            zero = torch.zeros_like(embeds[0, :1])
            placed = [torch.cat([zero, image_embeds[level].to(embeds.dtype)], 0)[index] for level in range(levels)]
            embeds = torch.where(is_image.unsqueeze(-1), placed[0], embeds)
            extra = {}
            if levels > 1:
                extra = {"visual_pos_masks": is_image, "deepstack_visual_embeds": placed[1:]}
            hidden = self.model.language_model(
                inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids, **extra
            ).last_hidden_state
            features = {"token_embeddings": hidden, ATTENTION_MASK: attention_mask}
            for module in self.after:
                features = module(features)
            return features[SENTENCE_EMBEDDING].to(torch.float32)

    return LanguageGraph().eval()


@contextmanager
def dense_deepstack(model):
    """While exporting: the language model adds each deepstack level as the dense tensor the
    graph placed (zero off the image tokens), where the library indexes by the image mask."""
    language = model.language_model
    if not hasattr(language, "_deepstack_process"):
        yield
        return
    language._deepstack_process = lambda hidden, masks, placed: hidden + placed.to(hidden.dtype)
    try:
        yield
    finally:
        del language._deepstack_process


def export_vision(graph, example: dict, onnx_file: Path, modules: Sequence) -> None:
    """``example``: one image's ``patches`` and ``position_ids`` (and, with a learned
    position grid, ``interp_indices`` and ``interp_weights``)."""
    names = [name for name in (PATCHES, POSITION_IDS, INTERP_INDICES, INTERP_WEIGHTS, WINDOW_IDS) if name in example]
    axes = {name: {0: "patches"} for name in names} | {IMAGE_EMBEDS: {1: "tokens"}}
    _export(graph, example, names, IMAGE_EMBEDS, axes, onnx_file, modules)


def export_language(graph, example: dict, onnx_file: Path, modules: Sequence) -> None:
    """``example``: a padded batch of two inputs of different lengths, one with an image."""
    axes = {
        INPUT_IDS: {0: "batch", 1: "sequence"},
        ATTENTION_MASK: {0: "batch", 1: "sequence"},
        POSITION_IDS: {1: "batch", 2: "sequence"},
        IMAGE_EMBEDS: {1: "tokens"},
        EMBEDDING: {0: "batch"},
    }
    names = [INPUT_IDS, ATTENTION_MASK, POSITION_IDS, IMAGE_EMBEDS]
    with dense_deepstack(graph.model):
        _export(graph, example, names, EMBEDDING, axes, onnx_file, modules)


def _export(graph, example: dict, names: list[str], output: str, axes: dict, onnx_file: Path, modules) -> None:
    import warnings

    import torch

    onnx_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        with torch.no_grad(), warnings.catch_warnings(), index_based_masks():
            warnings.simplefilter("ignore")  # shape-dependent Python branches: parity decides
            torch.onnx.export(
                graph, tuple(example[name] for name in names), str(onnx_file), input_names=names,
                output_names=[output], dynamic_axes=axes, opset_version=OPSET, do_constant_folding=True, dynamo=False,
            )
    except (RuntimeError, TypeError, ValueError, NotImplementedError, AttributeError, IndexError) as error:
        raise export_failure(error, modules) from error


def normalized_patches(patches, images: PatchImages):
    """``patches`` (uint8) as the vision graph's first nodes make them, in numpy: the
    processor's ``pixel_values`` (for checking the replay)."""
    import numpy as np

    scale = images.rescale
    offset = np.float32(np.asarray(images.mean) / scale).reshape(1, 3, 1, 1)
    divisor = np.float32(np.asarray(images.std) / scale).reshape(1, 3, 1, 1)
    values = (patches.astype(np.float32).reshape(len(patches), 3, 1, -1) - offset) / divisor
    return np.repeat(values, images.temporal_patch_size, axis=2).reshape(len(patches), -1)


def patch_images(image_processor) -> PatchImages:
    """What the gateway needs of a Qwen2-VL-style image processor (``Qwen2VLImageProcessor``)."""
    size = image_processor.size
    min_pixels = getattr(size, "shortest_edge", None) or size["shortest_edge"]
    max_pixels = getattr(size, "longest_edge", None) or size["longest_edge"]
    return PatchImages(
        patch_size=int(image_processor.patch_size), merge_size=int(image_processor.merge_size),
        temporal_patch_size=int(image_processor.temporal_patch_size), min_pixels=int(min_pixels),
        max_pixels=int(max_pixels), mean=tuple(float(v) for v in image_processor.image_mean),
        std=tuple(float(v) for v in image_processor.image_std), rescale=float(image_processor.rescale_factor),
    )


def message_template(transformer) -> MessageTemplate:
    """How ``transformer`` (a sentence-transformers Transformer of the ``message`` form)
    renders a text and an image: its own input formatter builds the messages of markers,
    its processor's chat template renders them, and the text around the markers is kept.
    The template's last tokens are found as the library finds them: the tokens two texts
    rendered alike end with."""
    from PIL import Image

    formatter, processor = transformer.input_formatter, transformer.processor

    def rendered(modality, value, prompt: str | None) -> str:
        names = modality if isinstance(modality, tuple) else (modality,)
        values = value if isinstance(modality, tuple) else (value,)
        _, inputs = formatter.batch_to_message(modality, {name: [one] for name, one in zip(names, values)})
        messages = inputs["message"]
        if prompt is not None:
            messages = formatter.prepend_prompt_to_messages(messages, prompt)
        return processor.apply_chat_template(messages[0], tokenize=False)

    def frame(text: str) -> Frame:
        if PROMPT_MARK in text:
            before, _, rest = text.partition(PROMPT_MARK)
            between, _, after = rest.partition(TEXT_MARK)
            return Frame(before=before, between=between, after=after)
        before, _, after = text.partition(TEXT_MARK)
        return Frame(before=before, after=after)

    plain = frame(rendered("text", TEXT_MARK, None))
    picture = Image.new("RGB", (28, 28))
    image_text = rendered("image", picture, None)
    if not (image_text.startswith(plain.before) and image_text.endswith(plain.after)):
        raise ValueError("the chat template renders an image in another frame than a text")
    image = image_text[len(plain.before) : len(image_text) - len(plain.after)]
    # An input of a text and an image, in either order: its parts one after another?
    joined = all(
        rendered(order, values, None) == plain.render(expected)
        for order, values, expected in (
            (("text", "image"), (TEXT_MARK, picture), TEXT_MARK + image),
            (("image", "text"), (picture, TEXT_MARK), image + TEXT_MARK),
        )
    )
    token = processor.image_token
    tokenizer = processor.tokenizer
    first, second = (
        tokenizer(plain.render(filler), add_special_tokens=False)["input_ids"] for filler in ("0", "1 2 3 4")
    )
    common = 0
    for left, right in zip(reversed(first), reversed(second)):
        if left != right:
            break
        common += 1
    return MessageTemplate(
        text=plain,
        prompted=frame(rendered("text", TEXT_MARK, PROMPT_MARK)),
        image=image,
        image_token=token,
        image_token_id=int(tokenizer.convert_tokens_to_ids(token)),
        suffix_ids=first[len(first) - common :] if 0 < common < min(len(first), len(second)) else [],
        parts_joined=joined,
    )
