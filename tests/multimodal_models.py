"""Tiny multimodal sentence-transformers models with random weights, built at test time (no
hub), in the forms sentence-transformers 6 serves through one ``Transformer``:

- the CLIP form: ``transformers.CLIPModel`` with a ``CLIPProcessor`` (a CLIP byte-level BPE
  tokenizer and a ``CLIPImageProcessor``), its texts through ``get_text_features`` and its
  images through ``get_image_features`` (``modality_config`` text and image), as
  ``sentence-transformers/clip-ViT-B-32`` is saved today;
- the vision-language form: a Qwen2-VL model whose processor renders every input through a
  chat template (``message``), images as image tokens inside the text, last-token pooling,
  as Qwen3-VL-Embedding and its kind are saved.
"""

from __future__ import annotations

from pathlib import Path

from tests.tiny_models import _normalize
from tests.tiny_transformers import INITIALIZER_RANGE, byte_level_bpe, torch_seed

# The CLIP form's image processor: the short side to 40, a 32x32 center crop.
CLIP_IMAGE_SIZE = 32
CLIP_SHORTEST_EDGE = 40
# The CLIP form's text position embeddings: the max length a text keeps, where the tokenizer
# names none.
CLIP_POSITIONS = 24


def clip_tokenizer(max_length: int | None = None):
    """A CLIP tokenizer over the byte-level alphabet (each character a token, words end in
    ``</w>``), its special tokens first; ``max_length`` None: it names no max length, as a
    CLIP tokenizer saved without ``model_max_length``."""
    from tokenizers import pre_tokenizers
    from transformers import CLIPTokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for suffix in ("", "</w>"):
        for character in alphabet:
            vocab[character + suffix] = len(vocab)
    options = {} if max_length is None else {"model_max_length": max_length}
    return CLIPTokenizer(vocab=vocab, merges=[], **options)


def clip_form_model(directory: Path, seed: int = 0, *, max_length: int | None = None, normalize: bool = False) -> Path:
    """The CLIP form: one Transformer over a tiny ``CLIPModel`` (then Normalize, where asked)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    torch_seed(seed)
    base = directory.parent / f"{directory.name}-clip"
    tokenizer = clip_tokenizer(max_length)
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = CLIPConfig(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
            "num_attention_heads": 2, "max_position_embeddings": CLIP_POSITIONS, "bos_token_id": 0,
            "eos_token_id": eos, "pad_token_id": eos, "initializer_range": INITIALIZER_RANGE,
        },
        vision_config={
            "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 2,
            "image_size": CLIP_IMAGE_SIZE, "patch_size": 8, "initializer_range": INITIALIZER_RANGE,
        },
        projection_dim=16,
    )
    CLIPModel(config).eval().save_pretrained(str(base))
    images = CLIPImageProcessor(
        size={"shortest_edge": CLIP_SHORTEST_EDGE}, crop_size={"height": CLIP_IMAGE_SIZE, "width": CLIP_IMAGE_SIZE}
    )
    CLIPProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(str(base))
    transformer = Transformer(str(base))
    modules = [transformer, _normalize()] if normalize else [transformer]
    SentenceTransformer(modules=modules, device="cpu").save(str(directory))
    return directory


VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def vision_language_model(directory: Path, seed: int = 0, *, architecture: str = "qwen2_vl") -> Path:
    """The vision-language form: a tiny Qwen2-VL whose processor takes messages through a
    chat template (an image becomes image tokens inside the text), last-token pooling,
    Normalize. ``architecture``: ``qwen3_vl`` (a learned position grid resampled per image,
    16-pixel patches, deepstack features from an inner vision layer added to the first
    language layers: Qwen3-VL-Embedding's form), or ``qwen2_5_vl`` (its vision tower
    attends in windows)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLModel,
        Qwen2_5_VLProcessor,
        Qwen2TokenizerFast,
        Qwen2VLConfig,
        Qwen2VLImageProcessor,
        Qwen2VLModel,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
        Qwen3VLConfig,
        Qwen3VLModel,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    torch_seed(seed)
    base = directory.parent / f"{directory.name}-qwen2vl"
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                "<|video_pad|>"]
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=byte_level_bpe(specials), eos_token="<|im_end|>", pad_token="<|endoftext|>",
        unk_token=None, padding_side="left",
    )
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in specials}
    config_class, model_class, processor_class = {
        "qwen2_vl": (Qwen2VLConfig, Qwen2VLModel, Qwen2VLProcessor),
        "qwen2_5_vl": (Qwen2_5_VLConfig, Qwen2_5_VLModel, Qwen2_5_VLProcessor),
        "qwen3_vl": (Qwen3VLConfig, Qwen3VLModel, Qwen3VLProcessor),
    }[architecture]
    patch = 16 if architecture == "qwen3_vl" else 14
    vision = {"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "patch_size": patch,
              "spatial_merge_size": 2, "temporal_patch_size": 2}
    text = {
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"], "vocab_size": len(tokenizer),
        "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "max_position_embeddings": 256,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
    }
    if architecture == "qwen2_5_vl":
        # Two layers: the first attends within 56-pixel windows, the second to the whole image;
        # weighted so that attending to the whole image in both moves an image past parity.
        vision = {**vision, "depth": 2, "intermediate_size": 48, "out_hidden_size": 32, "window_size": 56,
                  "fullatt_block_indexes": [1], "initializer_range": 0.5}
    if architecture == "qwen3_vl":
        # Larger weights than the default init: the position grid and the deepstack rows then
        # move an image's embedding well past the parity threshold (a graph without them fails).
        vision = {**vision, "depth": 2, "intermediate_size": 48, "out_hidden_size": 32, "num_position_embeddings": 16,
                  "deepstack_visual_indexes": [0], "initializer_range": 0.5}
        text = {key: value for key, value in text.items() if key != "rope_scaling"}
        text |= {"head_dim": 16, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                     "mrope_section": [2, 3, 3], "mrope_interleaved": True}}
    config = config_class(
        text_config=text,
        vision_config=vision,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )
    model_class(config).eval().save_pretrained(str(base))
    side = 2 * patch
    if architecture == "qwen3_vl":
        images = Qwen2VLImageProcessor(min_pixels=2 * side * side, max_pixels=16 * side * side, patch_size=patch,
                                       image_mean=[0.5] * 3, image_std=[0.5] * 3)
        videos = Qwen3VLVideoProcessor(size={"shortest_edge": 2 * side * side, "longest_edge": 16 * side * side})
    else:
        images = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112)
        videos = Qwen2VLVideoProcessor(min_pixels=56 * 56, max_pixels=112 * 112)
    processor_class(
        image_processor=images, tokenizer=tokenizer, video_processor=videos, chat_template=VL_TEMPLATE
    ).save_pretrained(str(base))
    transformer = Transformer(str(base))
    pool = Pooling(transformer.get_embedding_dimension(), pooling_mode="lasttoken")
    SentenceTransformer(modules=[transformer, pool, _normalize()], device="cpu").save(str(directory))
    return directory
