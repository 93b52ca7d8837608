"""Matching-device counts per request signature and node, kept current incrementally.

find_node must not run a full search on every node. This index answers,
for a signature (class plus request selectors) and a node, "how many devices
match, and how many of them are not exclusively allocated", in O(1) for
node-local devices. The counts are optimistic: taints, counters, capacity
and constraints are left to the search, so the index never rules out a node
that could work.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from operators.allocator.allocated import UsedDevice
from operators.allocator.compiled import (
    CompiledDevice,
    CompiledRequest,
    CompiledSlice,
    DeviceId,
    RequestSignature,
)
from operators.allocator.errors import AllocationError
from operators.allocator.nodes import NodeInfo
from operators.allocator.pools import slice_targets_node
from operators.allocator.selectors import SelectorCompileError, SelectorRuntimeError

if TYPE_CHECKING:  # for annotations only: state imports this module (a real cycle)
    from operators.allocator.state import AllocatorState

Signature = RequestSignature


def signature_of(request: CompiledRequest) -> Signature:
    return request.signature


@dataclass(slots=True)
class SignatureCounts:
    """Devices matching one signature, by node."""

    local: dict[str, list[DeviceId]] = field(default_factory=dict)
    free: dict[str, int] = field(default_factory=dict)
    node_of: dict[DeviceId, str] = field(default_factory=dict)
    # Local devices last seen exclusively allocated: a usage change moves ``free`` by one
    # per device that flipped, without recounting the node's devices.
    local_busy: set[DeviceId] = field(default_factory=set)
    shared: list[tuple[CompiledSlice, CompiledDevice]] = field(default_factory=list)
    shared_reach: dict[tuple[str, tuple[tuple[str, str], ...]], list[DeviceId]] = field(
        default_factory=dict
    )
    shared_lists: dict[tuple[DeviceId, ...], list[DeviceId]] = field(default_factory=dict)
    # Free devices per reach list (by id; the lists live in shared_lists), kept
    # current from allocation changes like ``free``: which lists hold a shared
    # device, and the shared devices last seen exclusively allocated.
    reach_free: dict[int, int] = field(default_factory=dict)
    reach_lists_of: dict[DeviceId, list[list[DeviceId]]] = field(default_factory=dict)
    shared_busy: set[DeviceId] = field(default_factory=set)
    # free count -> node names, sorted (local devices only): candidate order without
    # a per-node loop or a sort per pod. Kept only once asked for (see ``buckets``).
    by_free: dict[int, list[str]] | None = None
    # Nodes with a matching multi-allocatable device (and whether a shared one
    # exists): several requests may take such a device, so demands must not be summed.
    shareable_nodes: set[str] = field(default_factory=set)
    shareable_shared: bool = False

    def set_free(self, node: str, count: int) -> None:
        old = self.free.get(node)
        if old == count:
            return
        self.free[node] = count
        by_free = self.by_free
        if by_free is None:
            return  # no ranking by count asked for yet: nothing to keep sorted
        if old is not None:
            bucket = by_free[old]
            del bucket[bisect_left(bucket, node)]
            if not bucket:
                del by_free[old]
        insort(by_free.setdefault(count, []), node)

    def buckets(self) -> dict[int, list[str]]:
        """Node names by free count, each list sorted. Built on first use and kept from
        then on: first fit never ranks by count, and keeping the buckets sorted costs
        every allocation and release a bisect and an insert."""
        if self.by_free is None:
            by_free: dict[int, list[str]] = {}
            for node, count in self.free.items():
                by_free.setdefault(count, []).append(node)
            for names in by_free.values():
                names.sort()
            self.by_free = by_free
        return self.by_free

    def shareable(self, node: str) -> bool:
        return self.shareable_shared or node in self.shareable_nodes

    def add_reach_list(self, devices: list[DeviceId], in_use: Callable[[DeviceId], bool]) -> None:
        free = 0
        for device in devices:
            self.reach_lists_of.setdefault(device, []).append(devices)
            if in_use(device):
                self.shared_busy.add(device)
            else:
                free += 1
        self.reach_free[id(devices)] = free

    def update_shared(self, device: DeviceId, busy: bool) -> None:
        lists = self.reach_lists_of.get(device)
        if lists is None or busy == (device in self.shared_busy):
            return
        if busy:
            self.shared_busy.add(device)
        else:
            self.shared_busy.discard(device)
        delta = -1 if busy else 1
        for devices in lists:
            self.reach_free[id(devices)] += delta


class DeviceIndex:
    """SignatureCounts for every signature asked about, dropped when slices or classes change."""

    def __init__(self, state: AllocatorState) -> None:
        self.state = state
        self._entries: dict[Signature, SignatureCounts] = {}
        self._versions = (-1, -1)
        self._names: tuple[Sequence[NodeInfo], dict[str, NodeInfo]] | None = None
        # First-fit floors (see ``floor``), for one node tuple at a time.
        self._floors_for: tuple[NodeInfo, ...] | None = None
        self._positions: dict[str, int] = {}
        self._floors: dict[tuple[Signature, int], int] = {}
        state.add_listener(self._on_usage_change)

    def _check_versions(self) -> None:
        versions = (self.state.slices_version, self.state.classes_version)
        if versions != self._versions:
            self._entries.clear()
            self._floors.clear()
            self._versions = versions

    # --- first-fit floors -----------------------------------------------------------------

    def floor(self, signature: Signature, need: int, nodes: tuple[NodeInfo, ...]) -> int:
        """How many nodes at the start of ``nodes`` have fewer than ``need`` free
        node-local devices matching the signature: a first-fit walk for a pod that asks
        only that can start after them.

        A fill workload fills nodes in the caller's order, and without this every pod
        would count the full nodes again before it reaches one with room. The floor is
        raised by ``raise_floor`` once a walk has seen the nodes, and lowered at once
        when a device on a node below it is freed. Only a tuple of nodes has one: it
        cannot change under the positions kept for it, and an entry with devices that
        are not node-local (whose counts depend on more than the node's name) has none.
        """
        self._check_versions()
        if self._floors_for is not nodes:
            self._floors_for = nodes
            self._positions = {node.name: i for i, node in enumerate(nodes)}
            self._floors.clear()
        return self._floors.get((signature, need), 0)

    def raise_floor(
        self, signature: Signature, need: int, nodes: tuple[NodeInfo, ...], position: int
    ) -> None:
        """The walk found no node with room before ``position`` (see ``floor``)."""
        if self._floors_for is nodes and position > self._floors.get((signature, need), 0):
            self._floors[(signature, need)] = position

    def _lower_floors(self, signature: Signature, node: str) -> None:
        position = self._positions.get(node)
        if position is None:
            return
        for key, floor in self._floors.items():
            if key[0] == signature and position < floor:
                self._floors[key] = position

    def _on_usage_change(self, before: Sequence[UsedDevice], after: Sequence[UsedDevice]) -> None:
        entries = self._entries
        if not entries:
            return
        # Runs twice per pod (assume, release): usually one device, so no set for one.
        if len(before) + len(after) == 1:
            touched: Collection[DeviceId] = ((before or after)[0].device,)
        else:
            touched = {u.device for u in before} | {u.device for u in after}
        exclusive = self.state.allocated.exclusive
        floors = self._floors
        for signature, entry in entries.items():
            node_of = entry.node_of
            busy = entry.local_busy
            for device in touched:
                node = node_of.get(device)
                if node is None:
                    continue
                now = device in exclusive
                if now == (device in busy):
                    continue
                if now:
                    busy.add(device)
                    entry.set_free(node, entry.free[node] - 1)
                else:
                    busy.discard(device)
                    entry.set_free(node, entry.free[node] + 1)
                    if floors:
                        self._lower_floors(signature, node)
            if entry.reach_lists_of:
                for device in touched:
                    entry.update_shared(device, device in exclusive)

    def entry(self, signature: Signature) -> SignatureCounts:
        self._check_versions()
        entry = self._entries.get(signature)
        if entry is None:
            entry = self._build(signature)
            self._entries[signature] = entry
        return entry

    def _build(self, signature: Signature) -> SignatureCounts:
        class_name, expressions = signature
        cls = self.state.get_class(class_name)
        entry = SignatureCounts()
        if cls is None:
            return entry
        selectors = [s.expression for s in cls.selectors] + list(expressions)
        features = self.state.features
        for slice_ in self.state.slices.values():
            if not features.partitionable_devices and (slice_.per_device or slice_.shared_counters):
                continue
            for device in slice_.devices:
                if device.binding_conditions and not features.device_binding_conditions:
                    continue
                if not self._matches(selectors, device):
                    continue
                shareable = device.allow_multiple and features.consumable_capacity
                if slice_.node_name and not slice_.per_device:
                    entry.local.setdefault(slice_.node_name, []).append(device.id)
                    entry.node_of[device.id] = slice_.node_name
                    if shareable:
                        entry.shareable_nodes.add(slice_.node_name)
                else:
                    entry.shared.append((slice_, device))
                    entry.shareable_shared = entry.shareable_shared or shareable
        allocated = self.state.allocated
        for node, devices in entry.local.items():
            busy = [d for d in devices if allocated.in_use(d)]
            entry.local_busy.update(busy)
            entry.set_free(node, len(devices) - len(busy))
        return entry

    def _matches(self, selectors: Sequence[str | None], device: CompiledDevice) -> bool:
        for expression in selectors:
            if expression is None:
                return True  # the search reports unsupported selectors
            try:
                if not self.state.evaluator.matches(expression, device):
                    return False
            except (SelectorCompileError, SelectorRuntimeError):
                return True  # optimistic: the search reports the error
        return True

    def names(self, nodes: Sequence[NodeInfo]) -> dict[str, NodeInfo]:
        """Name -> node for a candidate list (remembered for the same list object)."""
        if (
            self._names is not None
            and self._names[0] is nodes
            and len(self._names[1]) == len(nodes)
        ):
            return self._names[1]
        table = {n.name: n for n in nodes}
        self._names = (nodes, table)
        return table

    def counts(self, signature: Signature, node: NodeInfo) -> tuple[int, int]:
        """(matching devices, matching devices not exclusively allocated) for the node."""
        entry = self.entry(signature)
        total = len(entry.local.get(node.name, ()))
        free = entry.free.get(node.name, 0)
        if entry.shared:
            shared_total, shared_free = self.shared_counts(entry, node)
            total += shared_total
            free += shared_free
        return total, free

    def shared_counts(self, entry: SignatureCounts, node: NodeInfo) -> tuple[int, int]:
        """Counts of the entry's network-attached (not node-local) devices the node reaches."""
        reach = entry.shared_reach.get(node.key)
        if reach is None:
            found = []
            for slice_, device in entry.shared:
                try:
                    ok = slice_targets_node(slice_, node, self.state.features)
                except AllocationError:
                    ok = True
                if ok and (not slice_.per_device or device.reachable_from(node)):
                    found.append(device.id)
            # Nodes that reach the same devices share one list (and one free count).
            reach = entry.shared_lists.get(tuple(found))
            if reach is None:
                reach = entry.shared_lists[tuple(found)] = found
                entry.add_reach_list(found, self.state.allocated.in_use)
            entry.shared_reach[node.key] = reach
        return len(reach), entry.reach_free[id(reach)]
