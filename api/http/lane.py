"""What a route's operation gives the fast lane (``fast_lane.py``): set on the operation
function as ``lane`` where its request goes whole to an endpoint."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..compute.requests.served import ServedModel


@dataclass(frozen=True)
class Lane:
    """What a route's operation gives the fast lane: its body's model, its endpoint (of the
    gateway's endpoints), and, where the path names the model, how to find it."""

    body: type
    endpoint_of: Callable[[Any], Any]
    model_of: Callable[[Any, dict[str, Any]], ServedModel] | None = None
