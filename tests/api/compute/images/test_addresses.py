import ipaddress

import pytest

from embedgate.api.compute.images.addresses import AddressPolicy, refusal

ip = ipaddress.ip_address


@pytest.mark.parametrize(
    "address, reason",
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("10.0.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.0.1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.251", "multicast"),
        ("ff05::2", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("100.64.0.1", "non-public"),  # carrier-grade NAT
        ("192.0.0.8", "non-public"),  # IETF protocol assignments
        ("198.18.0.1", "private"),  # benchmarking
        ("::ffff:127.0.0.1", "loopback (inside ::ffff:7f00:1)"),
        ("::ffff:192.168.1.1", "private (inside"),
        ("2002:a00:1::1", "private (inside"),  # 6to4 around 10.0.0.1
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "private"),  # Teredo
        ("64:ff9b::7f00:1", "reserved"),  # NAT64 around 127.0.0.1
    ],
)
def test_non_public_addresses_are_refused_with_a_reason(address, reason):
    found = refusal(ip(address))
    assert found is not None and found.startswith(reason), found


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "2a00:1450:4001::1"])
def test_public_addresses_pass(address):
    assert refusal(ip(address)) is None


def test_the_allow_list_admits_networks_addresses_and_host_names():
    policy = AddressPolicy(["10.1.0.0/16", "127.0.0.2", " Images.Internal. ", ""])
    assert policy.refusal(ip("10.1.2.3")) is None
    assert policy.refusal(ip("::ffff:10.1.2.3")) is None  # the same address, IPv4-mapped
    assert policy.refusal(ip("127.0.0.2")) is None
    assert policy.refusal(ip("10.2.0.1")) == "private"
    assert policy.refusal(ip("127.0.0.1")) == "loopback"
    assert policy.host_admitted("images.internal") and policy.host_admitted("IMAGES.internal.")
    assert not policy.host_admitted("localhost")


def test_an_empty_allow_list_admits_nothing_private():
    policy = AddressPolicy()
    assert policy.networks == [] and policy.hosts == set()
    assert policy.refusal(ip("127.0.0.1")) == "loopback"
    assert policy.refusal(ip("8.8.8.8")) is None
