"""RemoteAddressStrategyFactory: the address patterns of ``globalWhiteRemoteAddresses`` and ``whiteRemoteAddress``.

================================  =====================================================
``""`` / absent                   matches nothing
``*``, ``*.*.*.*``, ``*:*:*:*:*:*:*:*``  matches everything
``192.168.1.1``, ``::1``          one address (IPv6 compared fully expanded)
``192.168.1.1,192.168.1.2``       any of the listed addresses
``192.168.1.{1,2,3}``             the listed last segments (IPv6 ``...:{a,b}`` likewise)
``192.168.1.*``, ``192.168.*.*``  one segment any value, the later ones ``*``
``192.168.1.10-50``, ``10.1-9.*.*``  one segment in a range (hexadecimal for IPv6)
================================  =====================================================

Addresses are matched without the port. A pattern that cannot be read raises :class:`AclError`,
with Java's messages.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from .permission import AclError

RemoteAddressStrategy = Callable[[str], bool]

ANY_ADDRESS_PATTERNS = ("*", "*.*.*.*", "*:*:*:*:*:*:*:*")


def match_any(addr: str) -> bool:
    """NullRemoteAddressStrategy."""
    return True


def match_none(addr: str) -> bool:
    """BlankRemoteAddressStrategy."""
    return False


class MatchCache:
    """A matcher that remembers its answer per address: a broker sees few client addresses, over and over."""

    __slots__ = ("_answers", "_match")

    LIMIT = 4096

    def __init__(self, match: RemoteAddressStrategy) -> None:
        self._match = match
        self._answers: dict[str, bool] = {}

    def __call__(self, addr: str) -> bool:
        answer = self._answers.get(addr)
        if answer is None:
            if len(self._answers) >= self.LIMIT:
                self._answers.clear()
            answer = self._answers[addr] = self._match(addr)
        return answer


def is_ipv4(addr: str) -> bool:
    try:
        ipaddress.IPv4Address(addr)
    except ValueError:
        return False
    return True


def is_ipv6(addr: str) -> bool:
    try:
        ipaddress.IPv6Address(addr)
    except ValueError:
        return False
    return True


def expand_ip(addr: str, parts: int) -> str:
    """AclUtils.expandIP: upper case, ``::`` opened up to ``parts`` groups, each group padded to 4 digits."""
    addr = addr.upper()
    pad = parts - addr.count(":")
    if pad > 0:
        addr = addr.replace("::", ":" * (pad + 1))
    return ":".join(group.rjust(4, "0") for group in addr.split(":"))


def _split(text: str, sep: str) -> list[str]:
    # StringUtils.split: empty tokens dropped.
    return [t for t in text.split(sep) if t]


def remote_address_strategy(pattern: object) -> RemoteAddressStrategy:
    """The matcher for one pattern (``None`` or blank matches nothing)."""
    text = "" if pattern is None else str(pattern)
    if not text.strip():
        return match_none
    if text in ANY_ADDRESS_PATTERNS:
        return match_any
    if text.endswith("}"):
        is_v6 = ":" in text
        segments = _split(text, ":" if is_v6 else ".")
        if not is_v6 and len(segments) < 4:
            raise AclError(f"MultipleRemoteAddressStrategy has got a/some wrong format IP(s) {text}")
        last = segments[-1]
        if not last.startswith("{"):
            raise AclError(f"MultipleRemoteAddressStrategy netaddress examine scope Exception netaddress {text}")
        prefix = text[: text.index("{")]
        return _multiple([prefix + item for item in _split(last[1:-1], ",")])
    if "," in text:
        return _multiple(_split(text, ","))
    if "*" in text or "-" in text:
        return _Range(text).match
    return _one(text)


def _one(pattern: str) -> RemoteAddressStrategy:
    if not (is_ipv4(pattern) or is_ipv6(pattern)):
        raise AclError(f"Netaddress examine Exception netaddress is {pattern}")
    expected = expand_ip(pattern, 8)
    return lambda addr: expand_ip(addr, 8) == expected


def _multiple(addresses: list[str]) -> RemoteAddressStrategy:
    allowed = set()
    for addr in addresses:
        if is_ipv4(addr):
            allowed.add(addr)
        elif is_ipv6(addr):
            allowed.add(expand_ip(addr, 8))
        else:
            raise AclError(f"Netaddress examine Exception netaddress is {addr}")
    return lambda addr: (expand_ip(addr, 8) if is_ipv6(addr) else addr) in allowed


def _scope_error(pattern: str) -> AclError:
    return AclError(f"Netaddress examine scope Exception netaddress is {pattern}")


class _Range:
    """RangeRemoteAddressStrategy: the first ``*`` or ``a-b`` segment, after a fixed head."""

    def __init__(self, pattern: str) -> None:
        self.head: str | None = None
        self.index = 0
        self.start = 0
        self.end = 0
        try:
            if ":" in pattern:
                self._init_v6(pattern)
            else:
                self._init_v4(pattern)
        except (ValueError, IndexError):
            raise _scope_error(pattern) from None

    def _segment(self, value: str, limit: int, base: int, pattern: str) -> bool:
        value = value.strip()
        if value == "*":
            self.start, self.end = 0, limit
        elif "-" in value:
            if value.startswith("-"):
                raise AclError(f"RangeRemoteAddressStrategy netaddress examine scope Exception value {value} ")
            low, high = _split(value, "-")[:2]
            self.start, self.end = int(low, base), int(high, base)
            if not (0 <= self.start <= self.end <= limit):
                raise AclError(
                    "RangeRemoteAddressStrategy netaddress examine scope Exception "
                    f"start is {self.start} , end is {self.end}"
                )
        return self.end > 0

    def _init_v4(self, pattern: str) -> None:
        segments = _split(pattern, ".")
        for i in (1, 2, 3):
            self.index = i
            if self._segment(segments[i], 255, 10, pattern):
                break
        else:
            return
        # AclUtils.verify: four segments, the fixed ones within 0..255.
        if len(segments) != 4 or not all(0 <= int(s.strip()) <= 255 for s in segments[: self.index - 1]):
            raise _scope_error(pattern)
        self.head = "".join(s.strip() + "." for s in segments[: self.index])

    def _init_v6(self, pattern: str) -> None:
        asterisk, minus = pattern.find("*"), pattern.find("-")
        # AclUtils.IPv6AddressCheck: '*' only at the end; a range in the last (or, before '*', last but one) group.
        if asterisk > -1 and asterisk != len(pattern) - 1:
            raise _scope_error(pattern)
        if minus > -1:
            last = pattern.rfind(":")
            bound = last if asterisk == -1 else pattern.rfind(":", 0, last)
            if minus <= bound:
                raise _scope_error(pattern)
        segments = _split(pattern, ":")
        for i in range(1, len(segments)):
            self.index = i
            if self._segment(segments[i], 0xFFFF, 16, pattern):
                fixed = _split(expand_ip(pattern, 8), ":")[: self.index - 1]
                if not all(0 <= int(g, 16) <= 0xFFFF for g in fixed):
                    raise _scope_error(pattern)
                head = _v6_head(pattern, asterisk > -1, minus > -1)
                self.index = len(_split(head, ":"))
                self.head = head
                return

    def match(self, addr: str) -> bool:
        head = self.head
        if head is None:
            return False
        if is_ipv4(addr):
            if not addr.startswith(head):
                return False
            octets = addr.split(".")
            return self.start <= int(octets[self.index]) <= self.end
        if is_ipv6(addr):
            full = expand_ip(addr, 8)
            if not full.startswith(head):
                return False
            return self.start <= int(full[5 * self.index : 5 * self.index + 4], 16) <= self.end
        return False


def _v6_head(pattern: str, asterisk: bool, minus: bool) -> str:
    """AclUtils.v6ipProcess: the expanded groups before the ranged one."""
    if asterisk and minus:
        last = pattern.rfind(":")
        return expand_ip(pattern[: pattern.rfind(":", 0, last)], 6)
    if asterisk or minus:
        return expand_ip(pattern[: pattern.rfind(":")], 7)
    return expand_ip(pattern, 8)
