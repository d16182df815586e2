"""Who may do what: optional bearer API keys, and admin keys for model management.

- No keys configured: everything is open (a local, single-user server).
- API keys configured: every endpoint but health and docs needs one of them (or an admin key).
- Admin keys configured: load, unload and delete need one of them; an API key gets 403.
- Admin keys alone (no API keys): every endpoint but health and docs needs an admin key.
  Keys say the port is reachable by others, so inference is not left open.

Keys are compared in constant time (digests of equal length through
``hmac.compare_digest``), and every configured key is compared, so timing reveals neither
which key matched nor how much of one did.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPBearer

from ..errors import Forbidden, Unauthorized
from ..settings import Settings
from .openapi import errors, openai_errors


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class KeyRing:
    def __init__(self, api_keys: list[str], admin_keys: list[str]):
        self._api = [_digest(k) for k in api_keys]
        self._admin = [_digest(k) for k in admin_keys]

    @staticmethod
    def _matches(candidate: bytes, keys: list[bytes]) -> bool:
        found = False
        for key in keys:
            found |= hmac.compare_digest(candidate, key)
        return found

    def check(self, authorization: str | None, *, admin: bool) -> None:
        needed = self._admin if admin and self._admin else self._api + self._admin
        if not needed:
            return
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        candidate = _digest(token.strip())
        if self._matches(candidate, needed):
            return
        if admin and self._matches(candidate, self._api):
            raise Forbidden("this key may not load, unload or delete models")
        raise Unauthorized("invalid API key")


def _keyring(request: Request) -> KeyRing:
    return request.app.state.keyring


async def require_api_key(request: Request) -> None:
    _keyring(request).check(request.headers.get("authorization"), admin=False)


async def require_admin_key(request: Request) -> None:
    _keyring(request).check(request.headers.get("authorization"), admin=True)


# For the OpenAPI document only (the check above reads the header itself).
_bearer = HTTPBearer(auto_error=False, scheme_name="apiKey", description="An API key (or an admin key).")


def key_guard(settings: Settings, *, admin: bool = False, openai: bool = False) -> dict[str, Any]:
    """``include_router`` arguments for routes behind keys: the check, and, where the
    server has keys, what the document says of them: bearer security, 401, and 403 on the
    management routes when an API key can be refused there."""
    check = require_admin_key if admin else require_api_key
    if not (settings.api_keys or settings.admin_keys):
        return {"dependencies": [Depends(check)]}
    statuses = [401, 403] if admin and settings.admin_keys and settings.api_keys else [401]
    documented = openai_errors if openai else errors
    return {"dependencies": [Security(_bearer), Depends(check)], "responses": documented(*statuses)}
