"""The model repository (a directory or an S3 URL) and how models are converted into it:
the Triton form of new models, downloads from the hub, time limits, parity thresholds and
the models converted and loaded at startup."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field
from pydantic_settings import NoDecode

from embedgate.contract.repository.location import normalize as _repository_location
from embedgate.contract.repository.s3_client import check_supported as _repository_supported


class RepositorySettings(BaseModel):
    model_repository: Annotated[
        str, BeforeValidator(_repository_location), AfterValidator(_repository_supported)
    ] = Field(
        "model_repository",
        description="Where the Triton models are: a directory, or an S3 URL in Triton's syntax: "
        "s3://host:port/bucket/path (an S3-compatible service over HTTP; s3://https://host:port/... "
        "for HTTPS) or s3://bucket/path (Amazon S3). Credentials come from the AWS_* environment "
        "variables, never the URL.",
    )
    repository_cache_dir: Path | None = Field(
        None,
        description="S3 repository: where the gateway keeps its copies of models' metadata and "
        "tokenizers (never the weights) and stages conversions before uploading; default "
        "<triton_work_dir>/repository-cache.",
    )
    triton_form: Literal["python", "onnxruntime"] = Field(
        "python",
        description="Config form for new models: 'python' (Triton Python backend running "
        "onnxruntime; works with the embedded Triton) or 'onnxruntime' (native backend "
        "in NVIDIA's Triton container).",
    )
    allow_hub_download: bool = Field(
        False,
        description="Let conversions download models from the Hugging Face hub (at HF_ENDPOINT, with the "
        "token in HF_TOKEN: the server's environment); off, a model comes from this host only.",
    )
    conversion_timeout_s: float = Field(
        1800.0, gt=0, description="Seconds a conversion may take before it is killed."
    )
    parity_threshold: float = Field(
        0.9999, gt=0, le=1, description="Minimum cosine between ONNX and PyTorch embeddings to publish."
    )
    int8_parity_threshold: float = Field(
        0.99,
        gt=0,
        le=1,
        description="Minimum cosine between an '@int8' variant's embeddings and PyTorch's to publish it.",
    )
    preload_models: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Models to convert and load at startup: sentence-transformer names, "
        "or <model_name>:<pretrained> for OpenCLIP models.",
    )
