"""Who may do what: optional bearer API keys, and admin keys for model management.

- No keys configured: everything is open (a local, single-user server).
- API keys configured: every endpoint but health and docs needs one of them (or an admin key).
- Admin keys configured: load, unload and delete need one of them; an API key gets 403.
- Admin keys alone (no API keys): every endpoint but health and docs needs an admin key.
  Keys say the port is reachable by others, so inference is not left open.

Keys are compared in constant time (digests of equal length through
``hmac.compare_digest``), and every configured key is compared, so timing reveals neither
which key matched nor how much of one did.

A key that matched is the request's tenant (``compute/scheduling/tenants.py``): its keyed hash
(HMAC-SHA256 with ``EMBEDGATE_KEY_HASH_SECRET``) owns the bulk-job files and batches it
creates, and its name (or a short keyed hash) labels its metrics. Both are computed once, at
startup; the key itself is kept nowhere but in the settings.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPBearer

from ..compute.scheduling.tenants import Tenant, serve_as
from ..errors import Forbidden, Unauthorized
from ..settings import Settings
from ..telemetry import tag_key
from .openapi import errors

# Without a secret of the operator's the keyed hash is still one-way; the secret makes a
# copy of the job store useless for checking guessed keys against.
DEFAULT_SECRET = b"embedgate key owner"
SHORT_HASH_DIGITS = 8

Entry = tuple[bytes, Tenant]


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def keyed_hash(secret: str, purpose: str, key: str) -> str:
    """HMAC-SHA256 of ``key`` under the server's secret, for one ``purpose`` (an owner
    and a label of the same key share no digits)."""
    return hmac.new(secret.encode() or DEFAULT_SECRET, f"{purpose}\0{key}".encode(), hashlib.sha256).hexdigest()


def tenant_of(key: str, *, admin: bool, name: str | None, secret: str) -> Tenant:
    label = name or f"key-{keyed_hash(secret, 'label', key)[:SHORT_HASH_DIGITS]}"
    return Tenant(owner=keyed_hash(secret, "owner", key), label=label, admin=admin)


class KeyRing:
    def __init__(self, api_keys: list[str], admin_keys: list[str], *, names: dict[str, str] | None = None,
                 secret: str = ""):
        names = names or {}
        admins = set(admin_keys)

        def entries(keys: list[str]) -> list[Entry]:
            return [(_digest(k), tenant_of(k, admin=k in admins, name=names.get(k), secret=secret)) for k in keys]

        self._api = entries([k for k in api_keys if k not in admins])
        self._admin = entries(admin_keys)
        self.tenants = [tenant for _, tenant in self._api + self._admin]

    @classmethod
    def of(cls, settings: Settings) -> KeyRing:
        return cls(settings.api_keys, settings.admin_keys, names=settings.key_name_map(),
                   secret=settings.key_hash_secret)

    @staticmethod
    def _match(candidate: bytes, keys: list[Entry]) -> Tenant | None:
        found = None
        for digest, tenant in keys:  # every key compared, whichever matches
            if hmac.compare_digest(candidate, digest):
                found = tenant
        return found

    def check(self, authorization: str | None, *, admin: bool) -> Tenant | None:
        """The key's tenant (None where no keys are needed); Unauthorized or Forbidden."""
        needed = self._admin if admin and self._admin else self._api + self._admin
        if not needed:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        candidate = _digest(token.strip())
        tenant = self._match(candidate, needed)
        if tenant is not None:
            return tenant
        if admin and self._match(candidate, self._api) is not None:
            raise Forbidden("this key may not load, unload or delete models")
        raise Unauthorized("invalid API key")


def _keyring(request: Request) -> KeyRing:
    return request.app.state.keyring


def _serve(tenant: Tenant | None) -> Tenant | None:
    if tenant is not None:
        serve_as(tenant)
        tag_key(tenant.label)
    return tenant


async def require_api_key(request: Request) -> Tenant | None:
    return _serve(_keyring(request).check(request.headers.get("authorization"), admin=False))


async def require_admin_key(request: Request) -> Tenant | None:
    return _serve(_keyring(request).check(request.headers.get("authorization"), admin=True))


# For the OpenAPI document only (the check above reads the header itself).
_bearer = HTTPBearer(auto_error=False, scheme_name="apiKey", description="An API key (or an admin key).")


def key_guard(
    settings: Settings, *, admin: bool = False, documented: Callable[..., dict] = errors
) -> dict[str, Any]:
    """``include_router`` arguments for routes behind keys: the check, and what the document
    says of it (:func:`key_documentation`)."""
    documentation = key_documentation(settings, admin=admin, documented=documented)
    check = require_admin_key if admin else require_api_key
    return {**documentation, "dependencies": [*documentation.get("dependencies", ()), Depends(check)]}


def key_documentation(
    settings: Settings, *, admin: bool = False, documented: Callable[..., dict] = errors
) -> dict[str, Any]:
    """``include_router`` arguments that document routes behind keys, where the server has
    keys (in the routes' error shape, ``documented``): bearer security, 401, and 403 on the
    management routes when an API key can be refused there. For a router whose routes run
    their check themselves (``route_table.EndpointRouter``); :func:`key_guard` adds it."""
    if not (settings.api_keys or settings.admin_keys):
        return {}
    statuses = [401, 403] if admin and settings.admin_keys and settings.api_keys else [401]
    return {"dependencies": [Security(_bearer)], "responses": documented(*statuses)}
