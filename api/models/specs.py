"""A conversion job for a model into this gateway's repository, with this server's settings
(the spec the conversion subprocess reads: ``contract/spec.py``)."""

from __future__ import annotations

from typing import Any

from embedgate.contract.spec import ConversionSpec

from ..compute.scheduling.batching import BatchingPolicy
from ..settings import Settings
from .names import split_variant
from .refs import ModelRef


def conversion_spec(
    settings: Settings, repository: str, batching: BatchingPolicy, ref: ModelRef, **job: Any
) -> ConversionSpec:
    """The job for ``ref`` into ``repository`` (its location); ``job``: the load's own fields
    (``model_path``, ``trust_remote_code``, ``replace``)."""
    variant = ref.variant
    config_dir = settings.clip_model_config_dir if ref.library == "open_clip" else None
    return ConversionSpec(
        library=ref.library,
        # A variant ("<name>@int8") is converted from its model, with its own threshold.
        model_name=split_variant(ref.model_name)[0],
        variant=variant,
        pretrained=ref.pretrained,
        clip_model_config_dir=str(config_dir.resolve()) if config_dir else None,
        triton_name=ref.triton_name,
        parity_threshold=settings.int8_parity_threshold if variant == "int8" else settings.parity_threshold,
        repository=repository,
        repository_cache_dir=str(settings.repository_cache),
        triton=batching.triton_options(ref.library, variant),
        gpu_float16=settings.gpu_float16,
        late_chunking=settings.late_chunking and ref.library == "sentence_transformers" and variant is None,
        half_parity_threshold=settings.gpu_half_parity_threshold,
        allow_network=settings.allow_hub_download,
        **job,
    )
