"""Address patterns, with the cases of Apache's RemoteAddressStrategyTest (4.9.8)."""

from __future__ import annotations

import pytest

from gateway.acl.permission import AclError
from gateway.acl.remote_address import expand_ip, match_any, match_none, remote_address_strategy


@pytest.mark.parametrize("pattern", ["*", "*.*.*.*", "*:*:*:*:*:*:*:*"])
def test_everything(pattern: str) -> None:
    assert remote_address_strategy(pattern) is match_any


@pytest.mark.parametrize("pattern", [None, "", "  "])
def test_nothing(pattern: str | None) -> None:
    assert remote_address_strategy(pattern) is match_none


def test_one_address() -> None:
    match = remote_address_strategy("127.0.0.1")
    assert match("127.0.0.1")
    assert not match("127.0.0.2")
    assert not match("")
    v6 = remote_address_strategy("::1")
    assert v6("::1")
    assert v6("0000:0000:0000:0000:0000:0000:0000:0001")
    assert not v6("::2")


@pytest.mark.parametrize("pattern", ["127.0.0.1,127.0.0.2,127.0.0.3", "127.0.0.{1,2,3}"])
def test_listed_addresses(pattern: str) -> None:
    match = remote_address_strategy(pattern)
    assert [match(f"127.0.0.{i}") for i in range(5)] == [False, True, True, True, False]


@pytest.mark.parametrize(
    "pattern", ["1050::0005:0600:300c:1,1050::0005:0600:300c:2,1050::0005:0600:300c:3", "1050::0005:0600:300c:{1,2,3}"]
)
def test_listed_ipv6_addresses(pattern: str) -> None:
    match = remote_address_strategy(pattern)
    found = [match(f"1050:0000:0000:0000:0005:0600:300c:{i}") for i in range(5)]
    assert found == [False, True, True, True, False]


def _last_octet(pattern: str, head: str) -> list[int]:
    match = remote_address_strategy(pattern)
    return [i for i in range(-10, 300) if match(f"{head}{i}")]


def test_ranges() -> None:
    assert _last_octet("127.0.0.1-200", "127.0.0.") == list(range(1, 201))
    assert _last_octet("127.0.0.*", "127.0.0.") == list(range(256))
    assert _last_octet("127.*.*.*", "127.0.0.") == list(range(256))
    third = remote_address_strategy("127.0.1-200.*")
    assert third("127.0.5.9") and third("127.0.200.255")
    assert not third("127.0.0.9") and not third("127.0.201.1") and not third("127.1.5.9")
    second = remote_address_strategy("192.100-150.*.*")
    assert second("192.130.0.2") and not second("192.99.0.2")


def test_ipv6_ranges() -> None:
    head = "1050::0005:0600:300c:"
    found = [i for i in range(0x300) if remote_address_strategy("1050::0005:0600:300c:1-200")(f"{head}{i:x}")]
    assert found == list(range(1, 0x201))
    assert remote_address_strategy("1050::0005:0600:300c:*")(f"{head}ffff")
    assert not remote_address_strategy("1050::0005:0600:3001:*")(f"{head}1")
    two = remote_address_strategy("1050::0005:0600:300c:1-200:*")
    assert two("1050::0005:0600:300c:1:ffff")
    assert not two("1050::0005:0600:300c:201:0")


@pytest.mark.parametrize(
    "pattern",
    [
        "256.0.0.1",
        "::1ggg",
        "127.0.0.1,2,3}",
        "192.168.1.{1",
        "{192.168.1.1}",
        "192.168.{1}",
        "10.0.0.300-301",
        "10.0.0.-5",
        "1:2:*:4",
    ],
)
def test_refused_patterns(pattern: str) -> None:
    with pytest.raises(AclError):
        remote_address_strategy(pattern)


def test_expand_ip() -> None:
    assert expand_ip("::1", 8) == "0000:0000:0000:0000:0000:0000:0000:0001"
    assert expand_ip("2001:db8::ff", 8) == "2001:0DB8:0000:0000:0000:0000:0000:00FF"
    assert expand_ip("10.0.0.1", 8) == "10.0.0.1"
