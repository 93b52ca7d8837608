"""Consumable capacity: how much of a shareable device a request takes.

A request names amounts per capacity; a device's request policy rounds them
(to a range step or to the next valid value) and bounds them. Capacities the
request does not name are taken at the policy default or in full. Names are
normalised to "driver/name" so "memory" and "<driver>/memory" are the same.

Range steps are counted as upstream counts them, which depends on the
DRAFractionalCapacityRange gate (``fractional``): off, in whole units, each of
request, min and step rounded up to one (a 100m step is a step of 1); on, in
milli-units where min, max and step all are whole milli-units (else in whole
units still). Amounts are exact nano-units otherwise, and so is the search.
"""

from __future__ import annotations

from collections.abc import Mapping

from operators.allocator.compiled import CapacityEntry, CompiledDevice, RequestPolicy
from operators.allocator.errors import AllocationError, CapacityRequestError
from operators.allocator.quantities import Nanos
from operators.api.quantity import Quantity

Consumption = dict[str, Nanos]  # fully qualified capacity name -> amount

# Upstream rounds to a range step in signed 64-bit whole units; amounts past that (the
# request, or the value it rounds up to) cannot be rounded there, and end the allocation.
LARGEST_STEPPED: Nanos = (2**63 - 1) * 10**9
UNIT: Nanos = 10**9
MILLI: Nanos = 10**6
LARGEST_INT64 = 2**63 - 1


def _up(amount: Nanos, unit: Nanos) -> int:
    """The amount in ``unit``s, rounded up (as a Quantity's Value() and MilliValue())."""
    return -(-amount // unit)


def _in_millis(amount: Nanos) -> bool:
    return amount % MILLI == 0 and abs(amount // MILLI) <= LARGEST_INT64


def step_unit(policy: RequestPolicy, fractional: bool) -> Nanos:
    """The unit the policy's range steps are counted in: milli-units with the gate on when
    min, max and step all are whole milli-units (and the step at least one), else whole
    units."""
    if fractional:
        bounds = (policy.range_min, policy.range_max, policy.range_step)
        if all(b is None or _in_millis(b) for b in bounds) and (
            policy.range_step is None or policy.range_step >= MILLI
        ):
            return MILLI
    return UNIT


def qualified(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def device_capacity(device: CompiledDevice) -> dict[str, tuple[str, CapacityEntry]]:
    """Capacities by fully qualified name -> (name as published, entry).

    An entry spelled with the driver's domain wins over a bare one.
    """
    driver = device.id[0]
    out: dict[str, tuple[str, CapacityEntry]] = {}
    for name, entry in device.capacity.items():
        if name.startswith(driver + "/"):
            out[name] = (name, entry)
    for name, entry in device.capacity.items():
        key = qualified(name, driver)
        if key not in out:
            out[key] = (name, entry)
    return out


def resolve_requests(
    requests: Mapping[str, Nanos] | None, device: CompiledDevice
) -> dict[str, Nanos] | None:
    """Requested amounts keyed by the device's qualified names, or None if the
    device lacks a requested capacity (it is then unsuitable)."""
    if not requests:
        return {}
    driver = device.id[0]
    out: dict[str, Nanos] = {}
    for name, amount in requests.items():
        if name in device.capacity:
            key = qualified(name, driver)
        else:
            domain, sep, ident = name.partition("/")
            if sep:
                if domain != driver or ident not in device.capacity:
                    return None
                key = name
            elif f"{driver}/{name}" in device.capacity:
                key = f"{driver}/{name}"
            else:
                return None
        if key in out:
            raise AllocationError(
                f"capacity {key.partition('/')[2]!r} requested twice under different spellings"
            )
        out[key] = amount
    return out


def consumed_amount(
    requested: Nanos | None, entry: CapacityEntry, name: str = "", fractional: bool = False
) -> Nanos:
    """Amount a request consumes from one capacity after policy rounding.

    Raises CapacityRequestError when a request to round to a step cannot be counted in
    upstream's arithmetic (see LARGEST_STEPPED and step_unit)."""
    policy = entry.policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return entry.value
    if policy is None:
        return requested
    if policy.has_range and policy.range_min is not None:
        low = policy.range_min
        if requested < low:
            return low
        if policy.range_step is None:
            return requested
        unit = step_unit(policy, fractional)
        if unit == MILLI:
            if not _in_millis(requested):
                raise CapacityRequestError(
                    f"capacity {name!r}: the capacity request cannot be represented for "
                    "rounding to a step: it is not a 64-bit number of milli-units"
                )
        elif requested > LARGEST_STEPPED:
            raise CapacityRequestError(
                f"capacity {name!r}: the capacity request cannot be represented for "
                "rounding to a step: it is above the largest 64-bit integer"
            )
        # Each rounded up to the unit: exact in milli-units, where all three are whole.
        base, step = _up(low, unit), _up(policy.range_step, unit)
        rounded = base + _up(_up(requested, unit) - base, step) * step
        # Upstream's integer check holds only from a min of zero up; its milli one always.
        if rounded > LARGEST_INT64 and (unit == MILLI or base >= 0):
            what = "number of milli-units" if unit == MILLI else "integer"
            raise CapacityRequestError(
                f"capacity {name!r}: the capacity request cannot be represented once "
                f"rounded up to the next step: that is above the largest 64-bit {what}"
            )
        return rounded * unit
    if policy.valid_values is not None:
        for value in policy.valid_values:
            if requested <= value:
                return value
    return requested


def violates_policy(amount: Nanos, policy: RequestPolicy | None, fractional: bool = False) -> bool:
    if policy is None:
        return False
    if policy.default is not None and amount == policy.default:
        return False
    if policy.has_range:
        if policy.range_max is not None and amount > policy.range_max:
            return True
        if policy.range_step is not None and policy.range_min is not None:
            unit = step_unit(policy, fractional)
            if unit == MILLI and not _in_millis(amount):
                return True
            # Counted in the unit as consumed_amount counts, each rounded up to it.
            offset = _up(amount, unit) - _up(policy.range_min, unit)
            return offset % _up(policy.range_step, unit) != 0
        return False
    if policy.valid_values:
        return amount not in policy.valid_values
    return False


def consumption(
    requests: Mapping[str, Nanos] | None, device: CompiledDevice, fractional: bool = False
) -> Consumption | None:
    """What a request would consume on every capacity of the device.

    None if the device cannot serve the request at all (unknown capacity name
    or an amount the policy forbids). Raises CapacityRequestError for an amount no
    device may take; every capacity is checked for that before any policy, so the
    answer does not depend on the order of the capacities.
    """
    resolved = resolve_requests(requests, device)
    if resolved is None:
        return None
    out: Consumption = {}
    capacity = device_capacity(device)
    for key, (_, entry) in capacity.items():
        amount = consumed_amount(resolved.get(key), entry, key, fractional)
        if amount < 0:
            raise CapacityRequestError(f"capacity {key!r}: capacity value is negative")
        out[key] = amount
    for key, (_, entry) in capacity.items():
        if violates_policy(out[key], entry.policy, fractional):
            return None
    return out


def fits(
    requests: Mapping[str, Nanos] | None,
    device: CompiledDevice,
    in_use: Mapping[str, Nanos] | None,
    allocating: Mapping[str, Nanos] | None,
    fractional: bool = False,
) -> bool:
    """Whether the request fits next to what is allocated and being allocated."""
    wanted = consumption(requests, device, fractional)
    if wanted is None:
        return False
    capacity = device_capacity(device)
    for key, amount in wanted.items():
        total = amount + (in_use or {}).get(key, 0) + (allocating or {}).get(key, 0)
        if total > capacity[key][1].value:
            return False
    return True


def published_amounts(amounts: Mapping[str, Nanos], device: CompiledDevice) -> dict[str, Quantity]:
    """Amounts keyed by fully qualified names, as results show them: under the name the
    device published, in the notation of that capacity's value."""
    capacity = device_capacity(device)
    out: dict[str, Quantity] = {}
    for key, amount in amounts.items():
        published, entry = capacity[key]
        out[published] = Quantity.from_nanos(amount, entry.quantity.format)
    return out
