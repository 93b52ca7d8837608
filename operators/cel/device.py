"""The ``device`` variable of a selector, precomputed once per ResourceSlice change.

Building the view does all per-device work up front: qualified names are
split into domain and id (an unqualified name belongs to the driver's
domain), capacity strings become ``Quantity`` values, lists become tuples.
Evaluating a selector then only does dict lookups. Looking up an unknown
domain gives an empty map, as upstream does; a missing id inside a domain is
a "no such key" error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from operators.api.quantity import Quantity
from operators.api.semver import Semver

from .errors import CELEvalError


class IdMap(dict[str, Any]):
    """Identifiers of one domain to values. Read-only by convention."""

    __slots__ = ()


class DomainMap(dict[str, IdMap]):
    """Domains to ``IdMap``; an unknown domain reads as an empty map."""

    __slots__ = ()

    def __missing__(self, key: str) -> IdMap:
        return _EMPTY


_EMPTY = IdMap()

_SCALAR_TYPES = (bool, int, str, Semver)

#: CEL field name -> DeviceView attribute.
_CEL_FIELDS = {
    "driver": "driver",
    "attributes": "attributes",
    "capacity": "capacity",
    "allowMultipleAllocations": "allow_multiple_allocations",
}


def split_qualified_name(name: str, default_domain: str) -> tuple[str, str]:
    """``domain/id`` -> (domain, id); a name without a domain uses ``default_domain``."""
    domain, sep, ident = name.partition("/")
    if not sep:
        return default_domain, name
    return domain, ident


@dataclass(frozen=True, slots=True, eq=False)
class DeviceView:
    """What a selector sees of one device. Build it with ``DeviceView.build``."""

    driver: str
    attributes: DomainMap
    capacity: DomainMap
    allow_multiple_allocations: bool
    #: Why the device cannot be evaluated at all (an attribute without a usable value).
    invalid_attribute: str | None = None

    @classmethod
    def build(
        cls,
        driver: str,
        attributes: Mapping[str, Any],
        capacity: Mapping[str, Quantity | str | int],
        allow_multiple_allocations: bool | None = False,
    ) -> DeviceView:
        """Build the view from plain values.

        ``attributes`` values are bool, int, str, ``Semver`` or a list/tuple of
        those; ``capacity`` values are ``Quantity`` (strings and ints are parsed).
        """
        attribute_domains = DomainMap()
        invalid: str | None = None
        for name, value in attributes.items():
            domain, ident = split_qualified_name(name, driver)
            if isinstance(value, (list, tuple)):
                if not all(isinstance(v, _SCALAR_TYPES) for v in value):
                    invalid = invalid or f"attribute {name}: unsupported attribute value"
                value = tuple(value)
            elif not isinstance(value, _SCALAR_TYPES):
                invalid = invalid or f"attribute {name}: unsupported attribute value"
            attribute_domains.setdefault(domain, IdMap())[ident] = value
        capacity_domains = DomainMap()
        for name, quantity in capacity.items():
            domain, ident = split_qualified_name(name, driver)
            try:
                q = quantity if isinstance(quantity, Quantity) else Quantity(quantity)
            except (ValueError, TypeError) as exc:
                invalid = invalid or f"capacity {name}: {exc}"
                continue
            capacity_domains.setdefault(domain, IdMap())[ident] = q
        return cls(
            driver=driver,
            attributes=attribute_domains,
            capacity=capacity_domains,
            allow_multiple_allocations=bool(allow_multiple_allocations),
            invalid_attribute=invalid,
        )

    # Generic field access, used when the device is reached through another
    # name (for example ``cel.bind(d, device, d.driver)``).
    def cel_field(self, name: str) -> Any:
        attr = _CEL_FIELDS.get(name)
        if attr is None:
            raise CELEvalError(f"no such key: {name}")
        return getattr(self, attr)

    def cel_has_field(self, name: str) -> bool:
        return name in _CEL_FIELDS
