"""A tiny embedding model with code of its own, built at test time (no hub), as nomic-embed,
jina-embeddings, gte-v1.5 and stella ship theirs: an architecture transformers does not have
(``model_type`` "tiny-rotary": rotary attention, a gated MLP, RMSNorm) in its own
``configuration_*.py`` and ``modeling_*.py`` beside the weights, ``config.json``'s
``auto_map`` pointing at them, then mean pooling and Normalize. It loads only with
``trust_remote_code``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests import tiny_models

CONFIGURATION = '''
from transformers import PretrainedConfig


class TinyRotaryConfig(PretrainedConfig):
    model_type = "tiny-rotary"

    def __init__(self, vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=48, max_position_embeddings=128, rope_theta=10000.0,
                 initializer_range=0.5, rms_norm_eps=1e-6, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = rope_theta
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        super().__init__(**kwargs)
'''

MODELING = '''
import math

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from .configuration_tiny_rotary import TinyRotaryConfig


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rotate(x, cos, sin):
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.heads = config.num_attention_heads
        self.size = config.hidden_size // config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x, cos, sin, bias):
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, self.size).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.size) + bias, dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(batch, length, -1))


class GatedMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attention = Attention(config)
        self.mlp_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = GatedMLP(config)

    def forward(self, x, cos, sin, bias):
        x = x + self.attention(self.attention_norm(x), cos, sin, bias)
        return x + self.mlp(self.mlp_norm(x))


class TinyRotaryModel(PreTrainedModel):
    config_class = TinyRotaryConfig
    base_model_prefix = "tiny_rotary"

    def __init__(self, config):
        super().__init__(config)
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(0.0, self.config.initializer_range)
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.zero_()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **kwargs) -> BaseModelOutput:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        x = self.embeddings(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).float()
        # Computed here, not kept as a buffer: transformers builds a model on the meta device
        # before loading its weights, and a buffer made in __init__ would not survive that.
        size = self.config.hidden_size // self.config.num_attention_heads
        exponents = torch.arange(0, size, 2, device=input_ids.device).float() / size
        angles = torch.outer(positions, 1.0 / (self.config.rope_theta ** exponents))
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos()[None, None], angles.sin()[None, None]
        # Padding is never attended to; every token attends to every other (an encoder).
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, cos, sin, bias)
        return BaseModelOutput(last_hidden_state=self.norm(x))
'''

MODEL_TYPE = "tiny-rotary"


def remote_code_model(directory: Path, seed: int = 0) -> Path:
    """The model (a BERT WordPiece tokenizer, the architecture above, mean pooling,
    Normalize), saved as sentence-transformers saves it: its code files beside its weights."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    code = directory.parent / f"{directory.name}-code" / "tiny_rotary_code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "__init__.py").write_text("")
    (code / "configuration_tiny_rotary.py").write_text(CONFIGURATION)
    (code / "modeling_tiny_rotary.py").write_text(MODELING)
    sys.path.insert(0, str(code.parent))
    try:
        configuration = importlib.import_module("tiny_rotary_code.configuration_tiny_rotary")
        modeling = importlib.import_module("tiny_rotary_code.modeling_tiny_rotary")
    finally:
        sys.path.remove(str(code.parent))
    # save_pretrained then writes the code files beside the weights and auto_map into config.json.
    configuration.TinyRotaryConfig.register_for_auto_class()
    modeling.TinyRotaryModel.register_for_auto_class("AutoModel")

    tiny_models.torch_seed(seed)
    base = directory.parent / f"{directory.name}-base"
    tokenizer = tiny_models.bert_tokenizer(base)
    config = configuration.TinyRotaryConfig(vocab_size=len(tokenizer))
    modeling.TinyRotaryModel(config).eval().save_pretrained(str(base))
    tokenizer.save_pretrained(str(base))
    transformer = Transformer(
        str(base), max_seq_length=tiny_models.MAX_SEQ_LENGTH,
        model_kwargs={"trust_remote_code": True}, config_kwargs={"trust_remote_code": True},
        processor_kwargs={"trust_remote_code": True},
    )
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    SentenceTransformer(modules=[transformer, pooling, tiny_models._normalize()], device="cpu").save(str(directory))
    return directory
