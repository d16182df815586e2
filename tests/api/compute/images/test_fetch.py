"""The guarded image fetcher against a real HTTP server on loopback: what it refuses (with
the allow-list off), and what it fetches when the allow-list admits the server."""

from __future__ import annotations

import asyncio
import threading
import time

import httpcore
import pytest

from embedgate.api.compute.images.addresses import AddressPolicy
from embedgate.api.compute.images.fetch import ImageFetcher
from embedgate.contract.preprocess.images import ImageRejected
from tests.image_server import ImageServer

IMAGE = b"\x89PNG not really, but bytes are bytes" * 10


@pytest.fixture(scope="module")
def server():
    server = ImageServer("127.0.0.1")
    server.add("/image.png", IMAGE, headers={"Content-Type": "image/png"})
    yield server
    server.close()


@pytest.fixture(scope="module")
def other_server():
    """A second server on another loopback address: the one the allow-list admits."""
    server = ImageServer("127.0.0.2")
    yield server
    server.close()


def fetcher(allow=(), **options) -> ImageFetcher:
    settings = {"max_bytes": 1 << 20, "timeout_s": 5.0, "connect_timeout_s": 2.0, "max_redirects": 3, **options}
    return ImageFetcher(AddressPolicy(allow), **settings)


async def fetch(url: str, allow=(), **options) -> bytes:
    client = fetcher(allow, **options)
    try:
        return await client.fetch(url)
    finally:
        await client.close()


async def refused(url: str, code: str = "image_url_refused", allow=(), **options) -> str:
    with pytest.raises(ImageRejected) as caught:
        await fetch(url, allow, **options)
    assert caught.value.code == code, caught.value.reason
    return caught.value.reason


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",  # a DNS name that resolves to loopback
        "2130706433",  # decimal 127.0.0.1
        "0x7f.0.0.1",  # hexadecimal
        "127.1",  # short form
        "[::ffff:127.0.0.1]",  # IPv4-mapped IPv6
    ],
)
async def test_loopback_in_any_spelling_is_refused(server, host):
    asked = len(server.requests)
    reason = await refused(f"http://{host}:{server.port}/image.png")
    assert "loopback" in reason
    assert len(server.requests) == asked  # refused before connecting


async def test_octal_and_other_unparsable_hosts_are_refused(server):
    await refused(f"http://0177.0.0.1:{server.port}/image.png")


@pytest.mark.parametrize(
    "url, kind",
    [
        ("http://[::1]:9/", "loopback"),
        ("http://0.0.0.0:9/", "unspecified"),
        ("http://[::]:9/", "unspecified"),
        ("http://10.1.2.3/", "private"),
        ("http://172.16.0.1/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[fc00::1]/", "private"),
        ("http://224.0.0.1/", "multicast"),
        ("http://[ff02::1]/", "multicast"),
        ("http://240.0.0.1/", "reserved"),
        ("http://100.64.0.1/", "non-public"),
        ("http://[::ffff:10.0.0.1]/", "private"),
        ("http://[2002:7f00:1::]/", "inside"),  # 6to4 around 127.0.0.1
    ],
)
async def test_every_non_public_address_class_is_refused_before_connecting(url, kind):
    network = RecordingBackend()
    assert kind in await refused(url, inner_backend=network)
    assert network.connections == []


async def test_a_name_resolving_to_a_private_address_is_refused():
    async def resolver(host: str, port: int) -> list[str]:
        # One public and one private answer: any private answer refuses the host.
        return {"evil.example": ["8.8.8.8", "10.0.0.7"], "loop.example": ["127.0.0.1"]}[host]

    for host, address in (("evil.example", "10.0.0.7"), ("loop.example", "127.0.0.1")):
        with pytest.raises(ImageRejected) as caught:
            await fetch(f"http://{host}/x.png", resolver=resolver)
        assert f"resolves to {address}" in caught.value.reason


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://example.com/x.png", "gopher://x/", "http://user:secret@example.com/x.png", "http:///x.png"],
)
async def test_only_plain_http_and_https_urls(url):
    await refused(url)


async def test_the_allow_list_admits_a_network(server):
    assert await fetch(server.url("/image.png"), allow=["127.0.0.0/8"]) == IMAGE


async def test_the_allow_list_admits_a_host_name(server):
    assert await fetch(f"http://localhost:{server.port}/image.png", allow=["localhost"]) == IMAGE


async def test_an_admitted_address_does_not_admit_other_names_for_loopback(server, other_server):
    other_server.add("/image.png", IMAGE)
    assert await fetch(other_server.url("/image.png"), allow=["127.0.0.2"]) == IMAGE
    for url in (server.url("/image.png"), f"http://localhost:{server.port}/image.png"):
        await refused(url, allow=["127.0.0.2"])


async def test_every_redirect_hop_is_checked(server, other_server):
    other_server.redirect("/to-loopback", server.url("/image.png"))
    other_server.redirect("/to-metadata", "http://169.254.169.254/latest/meta-data/")
    other_server.redirect("/to-file", "file:///etc/passwd")
    seen_before = list(server.requests)
    assert "loopback" in await refused(other_server.url("/to-loopback"), allow=["127.0.0.2"])
    assert "link-local" in await refused(other_server.url("/to-metadata"), allow=["127.0.0.2"])
    await refused(other_server.url("/to-file"), allow=["127.0.0.2"])
    assert server.requests == seen_before  # the refused target was never contacted


async def test_redirects_are_followed_up_to_the_limit(other_server):
    other_server.add("/final.png", IMAGE)
    other_server.redirect("/hop1", "/final.png", status=301)  # relative Location
    other_server.redirect("/hop2", other_server.url("/hop1"), status=307)
    assert await fetch(other_server.url("/hop2"), allow=["127.0.0.2"], max_redirects=2) == IMAGE
    other_server.redirect("/loop", "/loop")
    reason = await refused(other_server.url("/loop"), "image_fetch_failed", allow=["127.0.0.2"])
    assert "more than 3 redirects" in reason


async def test_byte_limit_from_the_declared_length(other_server):
    other_server.add("/declared", b"x" * 5000)
    reason = await refused(other_server.url("/declared"), "image_too_large", allow=["127.0.0.2"], max_bytes=4096)
    assert "5000 bytes" in reason


async def test_byte_limit_while_streaming(other_server):
    # A body without a Content-Length that never ends: only the limit can stop the fetch.
    other_server.add("/endless", b"x" * 65536, endless=True)
    fetching = refused(other_server.url("/endless"), "image_too_large", allow=["127.0.0.2"], max_bytes=65536)
    await asyncio.wait_for(fetching, 60)


async def test_a_slow_server_hits_the_deadline(other_server):
    # The server answers only once the test lets it, after the fetch has given up.
    answer = threading.Event()
    other_server.add("/slow", IMAGE, hold=answer)
    started = time.monotonic()
    try:
        reason = await refused(other_server.url("/slow"), "image_fetch_failed", allow=["127.0.0.2"], timeout_s=0.5)
    finally:
        answer.set()
    assert "0.5s" in reason or "in time" in reason
    assert time.monotonic() - started >= 0.5


@pytest.mark.parametrize(
    "path, options, message",
    [
        ("/missing", {}, "HTTP 404"),
        ("/gzip", {"headers": {"Content-Encoding": "gzip"}}, "gzip"),
        ("/no-location", {"status": 302}, "without a Location"),
    ],
)
async def test_server_answers_that_are_not_an_image_body(other_server, path, options, message):
    if path != "/missing":
        other_server.add(path, IMAGE, **options)
    assert message in await refused(other_server.url(path), "image_fetch_failed", allow=["127.0.0.2"])


async def test_nothing_listening_is_a_fetch_failure(other_server):
    await refused("http://127.0.0.2:9/x.png", "image_fetch_failed", allow=["127.0.0.2"])


class RecordingBackend:
    """A network layer that records every connection asked of it and makes none."""

    def __init__(self):
        self.connections: list[tuple[str, int]] = []

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        self.connections.append((host, port))
        raise httpcore.ConnectError(f"no connection to {host}:{port} in this test")

    async def sleep(self, seconds):
        await asyncio.sleep(seconds)


class ElsewhereBackend:
    """A network layer that connects somewhere other than the address it was given (what a
    transparent proxy or a bug would do): the fetcher must notice from the socket itself."""

    def __init__(self, actual_port: int):
        self.inner = httpcore.AnyIOBackend()
        self.actual_port = actual_port

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return await self.inner.connect_tcp("127.0.0.1", self.actual_port, timeout, local_address, socket_options)

    async def sleep(self, seconds):
        await asyncio.sleep(seconds)


async def test_the_address_actually_connected_to_is_checked(server):
    async def resolver(host: str, port: int) -> list[str]:
        return ["8.8.8.8"]  # public: passes the check before connecting

    client = ImageFetcher(
        AddressPolicy(),
        max_bytes=1 << 20,
        timeout_s=5,
        connect_timeout_s=2,
        max_redirects=0,
        resolver=resolver,
        inner_backend=ElsewhereBackend(server.port),
    )
    try:
        with pytest.raises(ImageRejected) as caught:
            await client.fetch("http://images.example/image.png")
    finally:
        await client.close()
    assert caught.value.code == "image_url_refused"
    assert "127.0.0.1" in caught.value.reason
