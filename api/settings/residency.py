"""Which models stay loaded: loads on a model's first request, the memory budget the loaded
models share, how long an idle model stays loaded (docs/configuration.md, "Models in
memory")."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ResidencySettings(BaseModel):
    load_on_first_request: bool = Field(
        False,
        description="A request for a model that is in the repository but not loaded loads it, and is then "
        "answered (the wait counts against its deadline). Never converts: a model not in the repository stays "
        "a 404.",
    )
    memory_budget_mb: float = Field(
        0.0, ge=0, description="Host memory (MiB) the loaded models may hold together, as measured (the resident "
        "memory of their Triton stubs); a load that would pass it unloads the least recently used idle models "
        "first, or is refused (507). 0: no budget.",
    )
    gpu_memory_budget_mb: float = Field(
        0.0, ge=0, description="GPU memory (MiB) the loaded models' GPU instances may hold together, as they "
        "report it; as memory_budget_mb. 0: no budget.",
    )
    model_keep_alive_s: float = Field(
        -1.0, ge=-1, description="Seconds an idle model stays loaded before it is unloaded; a load may say its "
        "own (keep_alive). -1: for ever.",
    )
