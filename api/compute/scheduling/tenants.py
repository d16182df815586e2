"""Who a request comes from, as the compute path sees it: the key it carries, by a keyed
hash and a label, never the key itself.

The HTTP face finds the key (``http/auth.py``) and names it here for the request in
progress; admission (fair share, ``admission.py``) and the per-key limits (``rates.py``)
read it. Where the server has no keys there is no tenant: every request is anonymous and is
admitted as it always was.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Tenant:
    """One configured key: ``owner``, its keyed hash (what its files and batches are stored
    under); ``label``, its configured name or a short hash of its own (what metrics show);
    ``admin``, an admin key (it sees and manages every key's files and batches)."""

    owner: str
    label: str
    admin: bool = False


# Set once per request (each request runs in a task of its own, so it ends with it).
_current: ContextVar[Tenant | None] = ContextVar("embedgate_tenant", default=None)


def serve_as(tenant: Tenant | None) -> None:
    """The request in progress comes with ``tenant``'s key (None: no keys configured)."""
    _current.set(tenant)


def current() -> Tenant | None:
    return _current.get()
