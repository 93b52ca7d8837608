"""The Kubernetes CEL IP and CIDR libraries (``ip()``, ``cidr()`` and their methods).

Semantics follow the Kubernetes library: IPv4-mapped IPv6 addresses and zones
are rejected, ``isGlobalUnicast`` uses Go's definition (anything that is not
unspecified, loopback, link-local, multicast or the IPv4 broadcast address).
Importing this module registers the functions in ``functions``.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from . import functions
from .semantics import fail, no_overload

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Interface = ipaddress.IPv4Interface | ipaddress.IPv6Interface


class IP:
    __slots__ = ("address",)

    def __init__(self, address: Address) -> None:
        self.address = address

    def __eq__(self, other: object) -> bool:
        return type(other) is IP and other.address == self.address

    def __hash__(self) -> int:
        return hash(self.address)

    def __str__(self) -> str:
        return str(self.address)

    __repr__ = __str__


class CIDR:
    __slots__ = ("interface",)

    def __init__(self, interface: Interface) -> None:
        self.interface = interface

    def __eq__(self, other: object) -> bool:
        return type(other) is CIDR and other.interface == self.interface

    def __hash__(self) -> int:
        return hash(self.interface)

    def __str__(self) -> str:
        return str(self.interface)

    __repr__ = __str__


def _parse_ip(text: str) -> Address:
    if "%" in text:
        raise ValueError("IP address with zone value is not allowed")
    address = ipaddress.ip_address(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError("IPv4-mapped IPv6 address is not allowed")
    return address


def _parse_cidr(text: str) -> Interface:
    if "/" not in text:
        raise ValueError("network address must have a prefix length")
    address_text, _, _ = text.partition("/")
    _parse_ip(address_text)
    return ipaddress.ip_interface(text)


def _ip(text: Any) -> IP:
    if type(text) is not str:
        no_overload("ip", text)
    try:
        return IP(_parse_ip(text))
    except ValueError as exc:
        fail(f"IP Address {text!r} parse error during conversion from string: {exc}")


def _is_ip(text: Any) -> bool:
    if type(text) is not str:
        no_overload("isIP", text)
    try:
        _parse_ip(text)
    except ValueError:
        return False
    return True


def _is_canonical(text: Any) -> bool:
    address = _ip(text).address
    return str(address) == text


def _cidr(text: Any) -> CIDR:
    if type(text) is not str:
        no_overload("cidr", text)
    try:
        return CIDR(_parse_cidr(text))
    except ValueError as exc:
        fail(f"network address parse error during conversion from CIDR: {exc}")


def _is_cidr(text: Any) -> bool:
    if type(text) is not str:
        no_overload("isCIDR", text)
    try:
        _parse_cidr(text)
    except ValueError:
        return False
    return True


def _require_ip(fn: str, value: Any) -> Address:
    if type(value) is not IP:
        no_overload(fn, value)
    return value.address


def _require_cidr(fn: str, value: Any) -> Interface:
    if type(value) is not CIDR:
        no_overload(fn, value)
    return value.interface


def _family(value: Any) -> int:
    return int(_require_ip("family", value).version)


def _is_global_unicast(value: Any) -> bool:
    a = _require_ip("isGlobalUnicast", value)
    broadcast = isinstance(a, ipaddress.IPv4Address) and int(a) == 0xFFFFFFFF
    return not (a.is_unspecified or a.is_loopback or a.is_link_local or a.is_multicast or broadcast)


def _is_link_local_multicast(value: Any) -> bool:
    a = _require_ip("isLinkLocalMulticast", value)
    if isinstance(a, ipaddress.IPv4Address):
        return a in ipaddress.ip_network("224.0.0.0/24")
    return a in ipaddress.ip_network("ff02::/16")


def _contains_ip(cidr: Any, other: Any) -> bool:
    network = _require_cidr("containsIP", cidr).network
    address = _ip(other).address if type(other) is str else _require_ip("containsIP", other)
    return address.version == network.version and address in network


def _contains_cidr(cidr: Any, other: Any) -> bool:
    network = _require_cidr("containsCIDR", cidr).network
    inner = (_cidr(other) if type(other) is str else other).interface.network
    if inner.version != network.version:
        return False
    return bool(inner.subnet_of(network))  # type: ignore[arg-type]


def _string_with_network_types(value: Any) -> Any:
    if type(value) in (IP, CIDR):
        return str(value)
    return _base_string(value)


_base_string = functions.GLOBAL["string"]
functions.GLOBAL.update(
    {
        "ip": _ip,
        "isIP": _is_ip,
        "ip.isCanonical": _is_canonical,
        "cidr": _cidr,
        "isCIDR": _is_cidr,
        "string": _string_with_network_types,
    }
)
functions.MEMBER.update(
    {
        "family": _family,
        "isUnspecified": lambda v: _require_ip("isUnspecified", v).is_unspecified,
        "isLoopback": lambda v: _require_ip("isLoopback", v).is_loopback,
        "isLinkLocalMulticast": _is_link_local_multicast,
        "isLinkLocalUnicast": lambda v: (
            _require_ip("isLinkLocalUnicast", v).is_link_local
            and not _require_ip("isLinkLocalUnicast", v).is_multicast
        ),
        "isGlobalUnicast": _is_global_unicast,
        "containsIP": _contains_ip,
        "containsCIDR": _contains_cidr,
        "ip": lambda c: IP(_require_cidr("ip", c).ip),
        "masked": lambda c: CIDR(ipaddress.ip_interface(_require_cidr("masked", c).network)),
        "prefixLength": lambda c: int(_require_cidr("prefixLength", c).network.prefixlen),
    }
)
