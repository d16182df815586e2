"""Who may do what: API and admin keys, their names and keyed hash, fair shares and per-key
limits, remote code and local model paths, and the bounds of conversions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Self

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import NoDecode

from ..key_names import parse_key_names


class AccessSettings(BaseModel):
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated bearer keys; when set, every endpoint but health and docs needs one.",
    )
    admin_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated bearer keys required to load, unload and delete models; accepted "
        "wherever an API key is. Set without API keys, every endpoint but health and docs needs one.",
    )
    key_names: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated name=key pairs naming keys of EMBEDGATE_API_KEYS or EMBEDGATE_ADMIN_KEYS: "
        "per-key metrics show the name (default: key- and 8 hex digits of the key's keyed hash).",
    )
    key_hash_secret: str = Field(
        "",
        description="Secret of the keyed hash (HMAC-SHA256) that bulk-job files and batches record their owner "
        "key by, and unnamed keys' metric labels derive from (empty: a fixed one). Changing it leaves existing "
        "files and batches to admin keys.",
    )
    prometheus_without_key: bool = Field(
        False, description="GET /metrics/prometheus answers without a key, for a Prometheus that scrapes pods by "
        "annotation (the Helm chart's); every other endpoint keeps its keys."
    )
    key_fair_share: bool = Field(
        True, description="With keys: when the server must refuse work, it refuses the keys over their share first."
    )
    key_requests_per_minute: int = Field(0, ge=0, description="Inference requests one key may send per minute "
                                         "before 429 (0: no limit).")
    key_tokens_per_minute: int = Field(0, ge=0, description="Estimated tokens (an image: 1) a key may send to "
                                       "inference a minute before 429 (0: none).")
    allow_trust_remote_code: bool = Field(
        False, description="Let load requests run a model's own code (trust_remote_code)."
    )
    local_model_dirs: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated directories that model_path must lie in (empty: any path).",
    )
    converter_warm_s: float = Field(300.0, ge=0, description="Seconds a warm converter (its libraries imported "
                                    "once, each conversion forked from it) waits for the next; 0: none.")
    conversion_memory_limit_mb: int = Field(0, ge=0, description="Address-space cap of a conversion in MiB (0: none).")

    @model_validator(mode="after")
    def _names_name_keys(self) -> Self:
        self.key_name_map()
        return self

    def key_name_map(self) -> dict[str, str]:
        """Each named key's name (``EMBEDGATE_KEY_NAMES``), by key."""
        return parse_key_names(self.key_names, set(self.api_keys) | set(self.admin_keys))
