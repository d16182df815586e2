"""Which addresses the image fetcher may connect to: public unicast ones, and what the
allow-list admits.

A URL is a request to make a connection from inside the network, so every address a host
name resolves to is checked, not the name: loopback, private, link-local, multicast,
reserved, unspecified and other non-global addresses are refused, for IPv4 and IPv6,
including IPv4 addresses carried inside IPv6 ones (``::ffff:127.0.0.1``, 6to4, Teredo).
Odd spellings of a host (``2130706433``, ``0x7f.1``) need no special case: they resolve to
the address they mean, and that address is what is checked.

The allow-list (``EMBEDGATE_IMAGE_FETCH_ALLOW``) admits networks (``10.1.0.0/16``, an
address) and host names (``images.internal``, admitted whatever they resolve to).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Not reachable destinations on the Internet, whatever this Python's tables say about them.
_NOT_GLOBAL = [
    ipaddress.ip_network(net)
    for net in ("0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "198.18.0.0/15", "240.0.0.0/4", "64:ff9b::/96")
]
_CHECKS = (
    ("is_unspecified", "unspecified"),
    ("is_loopback", "loopback"),
    ("is_link_local", "link-local"),
    ("is_multicast", "multicast"),
    ("is_reserved", "reserved"),
    ("is_private", "private"),
)


def refusal(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public unicast address (None when it is one)."""
    if isinstance(ip, ipaddress.IPv6Address):
        teredo = ip.teredo
        for embedded in (ip.ipv4_mapped, ip.sixtofour, teredo[1] if teredo else None):
            if embedded is not None and (reason := refusal(embedded)) is not None:
                return f"{reason} (inside {ip})"
    for attribute, reason in _CHECKS:
        if getattr(ip, attribute):
            return reason
    if not ip.is_global or any(ip in network for network in _NOT_GLOBAL if network.version == ip.version):
        return "non-public"
    return None


class AddressPolicy:
    def __init__(self, allow: Iterable[str] = ()):
        self.networks: list[IPNetwork] = []
        self.hosts: set[str] = set()
        for entry in (item.strip() for item in allow):
            if not entry:
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self.hosts.add(normalize_host(entry))

    def host_admitted(self, host: str) -> bool:
        return normalize_host(host) in self.hosts

    def refusal(self, ip: IPAddress) -> str | None:
        """Why the fetcher must not connect to ``ip`` (None: it may)."""
        candidates = [ip]
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            candidates.append(ip.ipv4_mapped)
        if any(candidate in network for candidate in candidates for network in self.networks):
            return None
        return refusal(ip)


def normalize_host(host: str) -> str:
    return host.strip().lower().rstrip(".")
