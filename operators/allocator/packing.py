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
* devices that say where they sit are kept together, each group where its best free device
  is, so a request for several devices takes them from one NUMA node, and within it from one
  PCIe root, while that has room (first fit over the order fills one group before the next).
  The NUMA node is the standard ``resource.kubernetes.io/numaNode`` (KEP-6072) or a driver's
  own ``numaNode`` / ``numa``. The standard attribute comes in two forms: a number, or a list
  whose first entry is the device's node and whose others are the nodes of the same socket
  at the least distance; with the list form, when a NUMA node runs out the next group taken
  is one of its socket's, before a farther one;
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
# The attributes that name a device's place in the machine. A PCIe root sits in one NUMA
# node, so devices are grouped by NUMA node first and by PCIe root within it. The standard
# NUMA attribute wins over the names drivers used before it existed.
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
NUMA_NODE_ATTRIBUTES = ("resource.kubernetes.io/numaNode", "numaNode", "numa")

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


@dataclasses.dataclass(frozen=True, slots=True)
class _Place:
    """Where a device sits: its NUMA node and the nodes near it (the same socket's, from the
    list form of the standard attribute), and its PCIe root; None where it does not say."""

    numa: object | None
    near: tuple[object, ...]
    pcie_root: object | None


def _place(device: CompiledDevice) -> _Place | None:
    numa: object | None = None
    near: tuple[object, ...] = ()
    for name in NUMA_NODE_ATTRIBUTES:
        attr = device.lookup_attribute(name)
        if attr is not None and attr.values:
            numa, near = attr.values[0], attr.values[1:]
            break
    root = device.lookup_attribute(PCIE_ROOT_ATTRIBUTE)
    pcie_root = root.values[0] if root is not None and root.values else None
    if numa is None and pcie_root is None:
        return None
    return _Place(numa, near, pcie_root)


def _leads(
    keys: Sequence[object | None], devices: Sequence[CompiledDevice], allocated: AllocatedDevices
) -> dict[object, int]:
    """Each group's place in the order: the position of its first free device (of its first
    device when none is free, which then matters to no request)."""
    lead: dict[object, int] = {}
    for position, key in enumerate(keys):
        if key is not None and key not in lead and not allocated.is_allocated(devices[position].id):
            lead[key] = position
    for position, key in enumerate(keys):
        if key is not None:
            lead.setdefault(key, position)
    return lead


def _socket_order(
    lead: Mapping[object, int], near: Mapping[object, set[object]]
) -> dict[object, int]:
    """The NUMA groups' places when some say which nodes are near them: groups in order of
    their leads, except that after a group come the groups near it (its socket) before the
    next farther one. The places handed out are the same leads, reassigned in that order, so
    devices without a place keep theirs."""
    remaining = sorted(lead, key=lambda numa: lead[numa])
    chain: list[object] = []
    while remaining:
        last = chain[-1] if chain else None
        pick = next((n for n in remaining if n in near.get(last, ())), remaining[0])
        remaining.remove(pick)
        chain.append(pick)
    return dict(zip(chain, sorted(lead.values()), strict=True))


def _by_locality(slice_: CompiledSlice, allocated: AllocatedDevices) -> CompiledSlice:
    """The slice's devices with each NUMA node's devices together, and each PCIe root's
    within them, at the place of the group's first free device (devices that do not say
    where they sit keep their place)."""
    devices = slice_.devices
    places = [_place(d) for d in devices]
    if not any(places):
        return slice_
    numa_keys = [p.numa if p is not None else None for p in places]
    root_keys = [p.pcie_root if p is not None else None for p in places]
    numa_lead = _leads(numa_keys, devices, allocated)
    near: dict[object, set[object]] = {}
    for place in places:
        if place is not None and place.near:
            near.setdefault(place.numa, set()).update(place.near)
    if near:
        numa_lead = _socket_order(numa_lead, near)
    root_lead = _leads(root_keys, devices, allocated)

    def key(position: int) -> tuple[int, int, int]:
        numa, root = numa_keys[position], root_keys[position]
        inner = root_lead[root] if root is not None else position
        outer = numa_lead[numa] if numa is not None else inner
        return outer, inner, position

    ordered = tuple(devices[position] for position in sorted(range(len(devices)), key=key))
    if ordered == devices:
        return slice_
    return dataclasses.replace(slice_, devices=ordered)


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
