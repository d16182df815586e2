"""Fetching an image by URL without letting the URL reach what it should not.

- Only ``http`` and ``https``; no credentials in the URL; no proxy from the environment.
- The host is resolved here, every address it resolves to is checked
  (:mod:`api.preprocess.addresses`), and the connection is made to a checked address:
  the check happens inside the connection pool's network backend, so no later DNS answer
  (rebinding) can swap the address, TLS still verifies the certificate against the
  host name, and the peer address of the connected socket is checked again.
- Redirects are followed by hand, at most ``max_redirects``, each hop checked like the first.
- A connect timeout, and a deadline for the whole fetch (redirects and a slow trickle of
  bytes included).
- The byte limit is enforced while the body streams in: a ``Content-Length`` over it is
  refused before reading, and a body that grows past it is cut off.

Every refusal is an :class:`~api.preprocess.images.ImageRejected` with the reason.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpcore
import httpx

from embedgate.contract.preprocess.images import ImageRejected

from .addresses import AddressPolicy, IPAddress

Resolver = Callable[[str, int], Awaitable[list[str]]]
REDIRECTS = (301, 302, 303, 307, 308)
_USER_AGENT = b"embedgate-image-fetcher"


async def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (off the event loop: getaddrinfo runs in a thread)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """A network backend that connects only to addresses the policy accepts."""

    def __init__(self, policy: AddressPolicy, resolver: Resolver = resolve, inner: Any = None):
        self.policy = policy
        self.resolver = resolver
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self._vetted(host, port)
        error: Exception | None = None
        for address in addresses:
            try:
                stream = await self.inner.connect_tcp(str(address), port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as failure:
                error = failure
                continue
            peer = stream.get_extra_info("server_addr")
            if peer is None or _parse_ip(str(peer[0])) not in addresses:
                await stream.aclose()
                raise ImageRejected("image_url_refused", f"connected to {peer}, not an address {host} resolved to")
            return stream
        raise error or httpcore.ConnectError(f"no address to connect to for {host}")

    async def _vetted(self, host: str, port: int) -> list[IPAddress]:
        literal = _parse_ip(host)
        if literal is not None:
            names = [str(literal)]
        else:
            try:
                names = await self.resolver(host, port)
            except OSError as error:
                raise ImageRejected("image_fetch_failed", f"cannot resolve {host}") from error
        addresses = [ip for ip in (_parse_ip(name) for name in names) if ip is not None]
        if not addresses:
            raise ImageRejected("image_fetch_failed", f"cannot resolve {host}")
        if not self.policy.host_admitted(host):
            for address in addresses:
                reason = self.policy.refusal(address)
                if reason is not None:
                    where = "is" if literal is not None else f"resolves to {address}, which is"
                    raise ImageRejected("image_url_refused", f"{host} {where} a {reason} address")
        return addresses

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        raise ImageRejected("image_url_refused", "unix sockets are not reachable")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def _parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class ImageFetcher:
    def __init__(
        self,
        policy: AddressPolicy,
        *,
        max_bytes: int,
        timeout_s: float,
        connect_timeout_s: float,
        max_redirects: int,
        resolver: Resolver = resolve,
        inner_backend: Any = None,
    ):
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.connect_timeout_s = min(connect_timeout_s, timeout_s)
        self.max_redirects = max_redirects
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl.create_default_context(),
            network_backend=GuardedBackend(policy, resolver, inner_backend),
            max_connections=64,
            max_keepalive_connections=16,
            keepalive_expiry=30,
            retries=0,
        )

    async def close(self) -> None:
        await self._pool.aclose()

    async def fetch(self, url: str) -> bytes:
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._follow(url)
        except TimeoutError:
            raise ImageRejected(
                "image_fetch_failed", f"fetching the image took longer than {self.timeout_s:g}s"
            ) from None

    async def _follow(self, url: str) -> bytes:
        current = _checked_url(url)
        for _ in range(self.max_redirects + 1):
            location, body = await self._get(current)
            if location is None:
                return body
            try:
                current = _checked_url(str(current.join(location)))
            except httpx.InvalidURL as error:
                raise ImageRejected("image_url_refused", f"redirected to an invalid URL ({error})") from None
        raise ImageRejected("image_fetch_failed", f"more than {self.max_redirects} redirects")

    async def _get(self, url: httpx.URL) -> tuple[str | None, bytes]:
        """One request: (redirect location, b"") or (None, body)."""
        headers = [
            (b"Host", url.netloc),
            (b"Accept", b"image/*"),
            (b"Accept-Encoding", b"identity"),
            (b"User-Agent", _USER_AGENT),
        ]
        timeouts = {"connect": self.connect_timeout_s, "read": self.timeout_s, "write": self.timeout_s, "pool": self.timeout_s}
        target = httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path)
        try:
            async with self._pool.stream("GET", target, headers=headers, extensions={"timeout": timeouts}) as response:
                if response.status in REDIRECTS:
                    location = _header(response.headers, b"location")
                    if location is None:
                        raise ImageRejected("image_fetch_failed", f"HTTP {response.status} redirect without a Location")
                    return location, b""
                if response.status != 200:
                    raise ImageRejected("image_fetch_failed", f"the server answered HTTP {response.status}")
                return None, await self._read_body(response)
        except httpcore.TimeoutException:
            raise ImageRejected("image_fetch_failed", f"{url.host} did not answer in time") from None
        except (httpcore.NetworkError, httpcore.ProtocolError) as error:
            raise ImageRejected("image_fetch_failed", f"could not fetch from {url.host} ({type(error).__name__})") from None

    async def _read_body(self, response: httpcore.Response) -> bytes:
        encoding = _header(response.headers, b"content-encoding")
        if encoding not in (None, "identity"):
            raise ImageRejected("image_fetch_failed", f"the server sent a {encoding}-encoded body")
        declared = _header(response.headers, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise ImageRejected("image_too_large", f"the image is {declared} bytes, more than the limit of {self.max_bytes}")
        chunks, size = [], 0
        async for chunk in response.aiter_stream():
            size += len(chunk)
            if size > self.max_bytes:
                raise ImageRejected("image_too_large", f"the image is more than the limit of {self.max_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)


def _checked_url(text: str) -> httpx.URL:
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL as error:
        raise ImageRejected("image_url_refused", f"not a valid URL ({error})") from None
    if url.scheme not in ("http", "https"):
        raise ImageRejected("image_url_refused", f"the {url.scheme or 'missing'} scheme is not fetched; use http or https")
    if not url.host:
        raise ImageRejected("image_url_refused", "the URL has no host")
    if url.userinfo:
        raise ImageRejected("image_url_refused", "credentials in image URLs are not supported")
    return url


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None
