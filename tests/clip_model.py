"""A small OpenCLIP model for the tests: an architecture config and random weights saved as a
checkpoint, built at test time (no hub, a few MB)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

TINY_CLIP = "embedgate-tiny-clip"
# A real CLIP layout (ViT image tower, causal text transformer with argmax pooling,
# the CLIP tokenizer's vocabulary) at a fraction of the size. The context length is short
# so that truncation is easy to reach; the image size is not square to exercise that path.
TINY_CLIP_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": [48, 64], "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
    "text_cfg": {"context_length": 24, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}


@dataclass(frozen=True)
class TinyClip:
    model_name: str
    config_dir: Path  # holds <model_name>.json: EMBEDGATE_CLIP_MODEL_CONFIG_DIR
    checkpoint: Path  # pretrained=<this path>


def write_tiny_clip_config(config_dir: Path) -> Path:
    """``config_dir`` holding the tiny CLIP's architecture (for EMBEDGATE_CLIP_MODEL_CONFIG_DIR)."""
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / f"{TINY_CLIP}.json").write_text(json.dumps(TINY_CLIP_CONFIG))
    return config_dir


def build_tiny_clip(directory: Path, seed: int = 0, config_dir: Path | None = None) -> TinyClip:
    """Random weights under ``directory``; the architecture in ``config_dir`` (default:
    ``directory/configs``), which a gateway started before may already read."""
    import open_clip
    import torch

    config_dir = write_tiny_clip_config(config_dir or directory / "configs")
    open_clip.add_model_config(config_dir)
    torch.manual_seed(seed)
    model = open_clip.create_model(TINY_CLIP)
    directory.mkdir(parents=True, exist_ok=True)
    checkpoint = directory / f"tiny-clip-{seed}.pt"
    torch.save(model.state_dict(), checkpoint)
    return TinyClip(TINY_CLIP, config_dir, checkpoint)


def reference_model(tiny: TinyClip):
    """The PyTorch model, its eval transform and its tokenizer, as a user of open_clip gets them."""
    import open_clip

    open_clip.add_model_config(tiny.config_dir)
    model, _, preprocess = open_clip.create_model_and_transforms(tiny.model_name, pretrained=str(tiny.checkpoint))
    return model.eval(), preprocess, open_clip.get_tokenizer(tiny.model_name)


TINY_SIGLIP = "embedgate-tiny-siglip"
# A corpus for the tokenizers of the tiny SigLIP models: enough to learn a few hundred
# pieces, cased and with punctuation and accents, as canonicalized text is not the only input.
_CORPUS = [
    "a photo of a cat",
    "a photo of a dog playing in the snow",
    "a diagram of a neural network",
    "the quick brown fox jumps over the lazy dog",
    "an oil painting of a lighthouse at dusk",
    "a close-up photograph of a red apple on a wooden table",
    "two people riding bicycles along the river",
    "a black and white sketch of a mountain village",
    "a bowl of ramen with an egg and green onions",
    "the skyline of a city at night, lit by neon signs",
    "a child reading a book under a tree",
    "a satellite image of farmland and roads",
    "a blurry picture of a bird in flight",
    "a screenshot of a spreadsheet with charts",
    "a vintage car parked in front of a café",
    "Ünïcödé text: naïve façade, déjà vu, smörgåsbord",
    "a watercolor of sunflowers in a blue vase",
    "a dog wearing sunglasses on the beach",
    "a close up of a circuit board",
    "an aerial view of a stadium full of people",
    "a plate of sushi and a cup of green tea",
    "a cartoon of a robot waving hello",
    "the inside of a cathedral with stained glass windows",
    "a herd of elephants crossing a dusty plain",
    "a snowy forest path in the early morning",
    "a person typing on a laptop in a library",
    "a macro shot of a dragonfly on a leaf",
    "a hand-drawn map of an imaginary island",
    "a bakery display full of bread and pastries",
    "a foggy harbour with fishing boats",
    "a statue of a lion in a public square",
    "a kitten sleeping on a pile of laundry",
]


def build_t5_like_tokenizer(directory: Path) -> Path:
    """A SentencePiece-style Unigram tokenizer like SigLIP's (T5's vocabulary layout: <pad>,
    </s>, <unk> first; </s> appended to every text and used for padding, as SigLIP pads),
    saved as a transformers tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.Unigram())
    backend.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    backend.train_from_iterator(_CORPUS, trainer)
    backend.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", backend.token_to_id("</s>"))]
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>", pad_token="</s>")
    tokenizer.save_pretrained(directory)
    return directory


def build_gemma_like_tokenizer(directory: Path) -> Path:
    """A byte-pair tokenizer like SigLIP2's Gemma one (no pre-tokenization, spaces as ▁,
    <pad> <eos> <bos> <unk> <mask> first, <eos> appended, padded with <pad>), saved as a
    transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.normalizer = normalizers.Replace(" ", "▁")
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " ")])
    backend.train_from_iterator(_CORPUS, trainers.BpeTrainer(vocab_size=400, special_tokens=specials))
    backend.post_processor = processors.TemplateProcessing(
        single="$A <eos>", special_tokens=[("<eos>", backend.token_to_id("<eos>"))]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        mask_token="<mask>",
    )
    tokenizer.save_pretrained(directory)
    return directory


TOKENIZER_BUILDERS = {"t5": build_t5_like_tokenizer, "gemma": build_gemma_like_tokenizer}


def tiny_siglip_config(tokenizer_dir: Path, vocab_size: int) -> dict:
    """SigLIP's text tower (bidirectional, pooled at the last position, a projection with a
    bias, a Hugging Face tokenizer with canonicalized text) at a fraction of the size, with
    OpenCLIP's own ViT as the image tower (SigLIP's is a timm model). The context length is
    short so that truncation is easy to reach."""
    return {
        "embed_dim": 32,
        "init_logit_bias": -10,
        "custom_text": True,
        "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
        "text_cfg": {
            "context_length": 16,
            "vocab_size": vocab_size,
            "hf_tokenizer_name": str(tokenizer_dir),
            "tokenizer_kwargs": {"clean": "canonicalize"},
            "width": 64,
            "heads": 2,
            "layers": 2,
            "no_causal_mask": True,
            "proj_bias": True,
            "pool_type": "last",
            "norm_kwargs": {"eps": 1e-6},
        },
    }


def build_tiny_siglip(directory: Path, tokenizer: str = "t5", seed: int = 0) -> TinyClip:
    """A tiny SigLIP-style model (``tokenizer="t5"``) or SigLIP2-style one (``"gemma"``): its
    config in ``directory / "configs"`` (shared with build_tiny_clip's when given the same
    directory), its tokenizer in a local directory the config names, random weights."""
    import open_clip
    import torch
    from transformers import AutoTokenizer

    tokenizer_dir = TOKENIZER_BUILDERS[tokenizer](directory / f"siglip-{tokenizer}-tokenizer")
    vocab_size = len(AutoTokenizer.from_pretrained(tokenizer_dir))
    model_name = f"{TINY_SIGLIP}-{tokenizer}"
    config_dir = directory / "configs"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / f"{model_name}.json").write_text(json.dumps(tiny_siglip_config(tokenizer_dir, vocab_size)))
    open_clip.add_model_config(config_dir)
    torch.manual_seed(seed)
    model = open_clip.create_model(model_name)
    checkpoint = directory / f"{model_name}-{seed}.pt"
    torch.save(model.state_dict(), checkpoint)
    return TinyClip(model_name, config_dir, checkpoint)
