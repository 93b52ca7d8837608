"""The ``pack`` device policy: among devices that fit, take those that keep big ones free.

Upstream's per-node search is first fit: it takes devices in slice order, so partitions
(MIG-like devices that consume counters of a shared physical device) land on every GPU in
turn and soon no whole GPU is left (NVIDIA driver reports #932, #933). The search itself
stays first fit; ``pack`` only changes the order it is shown the candidates in, so every
answer is still one the search accepts under upstream's rules:

* pools where devices are already allocated come before untouched pools;
* in each slice, a device consuming counters comes before others in best-fit order: the
  counter sets already partly used first, and among them the one left with the least
  capacity after the device is taken; untouched counter sets (whole physical devices)
  come last, so a later whole-device request still finds one;
* among equal fits, the device that rules out the fewest other free devices of its slice
  (weighted by their size): a small partition goes where it blocks no bigger one (MIG-like
  placement, where partitions consume positional counters);
* devices that say where they sit (a PCIe root, a NUMA node: ``LOCALITY_ATTRIBUTES``) are
  kept together, each group where its best free device is, so a request for several devices
  takes them from one PCIe root or NUMA node while that has room (first fit over the order
  fills one group before the next);
* ties keep the slice's order, so the result is deterministic.

``first-fit`` (the default) leaves the order alone and is exactly upstream's behaviour.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from operators.allocator.allocated import AllocatedDevices
from operators.allocator.compiled import CompiledDevice, CompiledSlice
from operators.allocator.pools import Pool, counters_left
from operators.allocator.quantities import Nanos

DEVICE_POLICIES = ("first-fit", "pack")
# Attributes that name a device's place in the machine, most specific first: the standard
# PCIe root attribute, then the NUMA node names drivers publish.
LOCALITY_ATTRIBUTES = ("resource.kubernetes.io/pcieRoot", "numaNode", "numa")

CounterSets = Mapping[str, Mapping[str, Nanos]]


def pack_pools(pools: Sequence[Pool], allocated: AllocatedDevices) -> list[Pool]:
    """The pools (and their devices) in pack order; see the module docstring."""
    ordered = []
    for position, pool in enumerate(pools):
        used, available = _pool_usage(pool, allocated)
        slices = pool.slices
        if pool.counter_sets:
            slices = tuple(
                _ordered_slice(s, pool.counter_sets, available, allocated) for s in slices
            )
        slices = tuple(_by_locality(s, allocated) for s in slices)
        if any(a is not b for a, b in zip(slices, pool.slices, strict=True)):
            pool = dataclasses.replace(pool, slices=slices)
        ordered.append((0 if used else 1, position, pool))
    ordered.sort(key=lambda item: (item[0], item[1]))
    return [pool for _, _, pool in ordered]


def _pool_usage(
    pool: Pool, allocated: AllocatedDevices
) -> tuple[bool, dict[str, dict[str, Nanos]]]:
    """Whether any device of the pool is allocated, and the counters left per set."""
    used = any(
        allocated.is_allocated(device.id)
        for slice_ in (*pool.slices, *pool.slices_elsewhere)
        for device in slice_.devices
    )
    return used, counters_left(pool, allocated)


def _ordered_slice(
    slice_: CompiledSlice,
    totals: CounterSets,
    available: CounterSets,
    allocated: AllocatedDevices,
) -> CompiledSlice:
    free_devices = [
        d for d in slice_.devices if d.consumes_counters and not allocated.is_allocated(d.id)
    ]
    keyed = [
        (device_key(device, totals, available, free_devices), index, device)
        for index, device in enumerate(slice_.devices)
    ]
    keyed.sort(key=lambda item: (item[0], item[1]))
    devices = tuple(device for _, _, device in keyed)
    if devices == slice_.devices:
        return slice_
    return dataclasses.replace(slice_, devices=devices)


def _locality(device: CompiledDevice) -> tuple[str, tuple[object, ...]] | None:
    for name in LOCALITY_ATTRIBUTES:
        attr = device.lookup_attribute(name)
        if attr is not None and attr.values:
            return name, attr.values
    return None


def _by_locality(slice_: CompiledSlice, allocated: AllocatedDevices) -> CompiledSlice:
    """The slice's devices with each locality group together, at the place of its first free
    device (devices without a locality attribute keep their place)."""
    places = [_locality(d) for d in slice_.devices]
    if not any(places):
        return slice_
    lead: dict[tuple[str, tuple[object, ...]], int] = {}
    for position, (device, place) in enumerate(zip(slice_.devices, places, strict=True)):
        if place is not None and place not in lead and not allocated.is_allocated(device.id):
            lead[place] = position
    keyed = sorted(
        (
            (lead.get(place, position) if place is not None else position, position, device)
            for position, (device, place) in enumerate(zip(slice_.devices, places, strict=True))
        ),
        key=lambda item: (item[0], item[1]),
    )
    devices = tuple(device for _, _, device in keyed)
    if devices == slice_.devices:
        return slice_
    return dataclasses.replace(slice_, devices=devices)


def device_key(
    device: CompiledDevice,
    totals: CounterSets,
    available: CounterSets,
    free_devices: Sequence[CompiledDevice],
) -> tuple[int, float, int]:
    """Smaller first: (0 on a partly used counter set / 1 on an untouched one / 2 without
    counters; the share of its counter sets left after taking it (best fit); how many
    devices of the slice that could still be taken it rules out, weighted by what they
    consume (a partition placed where it blocks the fewest bigger ones))."""
    if not device.consumes_counters:
        return 2, 0.0, 0
    untouched = True
    left = 0.0
    after = {name: dict(available.get(name) or {}) for name, _ in device.consumes_counters}
    for set_name, counters in device.consumes_counters:
        total = totals.get(set_name) or {}
        free = after[set_name]
        for name, amount in counters.items():
            if name in free:
                free[name] -= amount
        shares = [max(free.get(c, 0), 0) / whole for c, whole in total.items() if whole]
        if any(free.get(c, 0) + counters.get(c, 0) < whole for c, whole in total.items()):
            untouched = False
        left += sum(shares) / len(shares) if shares else 0.0
    blocked = 0
    for other in free_devices:
        if other is device or not _fits(other, available) or _fits(other, after):
            continue
        blocked += sum(sum(c.values()) for _, c in other.consumes_counters) or 1
    return (1 if untouched else 0), left, blocked


def _fits(device: CompiledDevice, available: CounterSets) -> bool:
    """Whether the counters left cover what the device consumes (sets not in ``available``
    are not the question here)."""
    for set_name, counters in device.consumes_counters:
        free = available.get(set_name)
        if free is None:
            continue
        for name, amount in counters.items():
            if free.get(name, 0) < amount:
                return False
    return True
