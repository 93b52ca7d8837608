"""Pool gathering: which devices a node can reach, pool by pool.

Drivers publish a pool as one or more slices that share a generation; only
the newest generation counts, and a pool is usable only once all its slices
are seen. Incomplete and invalid pools are recorded (the search skips them;
"All" requests fail on them), obsolete ones are dropped. Order is
deterministic: by (driver, pool), pools with binding conditions last, and
slices by name, so drivers can steer first-fit placement by naming.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from operators.allocator.allocated import AllocatedDevices
from operators.allocator.compiled import CompiledSlice, PoolId
from operators.allocator.errors import AllocationError
from operators.allocator.features import Features
from operators.allocator.nodes import NodeInfo
from operators.allocator.quantities import Nanos


@dataclass(frozen=True, slots=True)
class Pool:
    id: PoolId
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: tuple[CompiledSlice, ...] = ()  # device slices that target the node
    slices_elsewhere: tuple[CompiledSlice, ...] = ()  # device slices of the pool that do not
    counter_sets: Mapping[str, Mapping[str, Nanos]] = field(default_factory=dict)
    has_binding_conditions: bool = False
    # A device of the pool declares compatibility groups and their gate is on: only then
    # does the search check them (where no device has one, every device is admitted).
    compatibility_groups: bool = False

    @property
    def name(self) -> str:
        """Upstream's PoolID.String(): "driver/pool"."""
        return f"{self.id[0]}/{self.id[1]}"

    @property
    def usable(self) -> bool:
        return not self.incomplete and not self.invalid


def slice_targets_node(slice_: CompiledSlice, node: NodeInfo, features: Features) -> bool:
    """Whether the slice is relevant to the node (errors for bad selectors)."""
    if slice_.shared_counters and features.partitionable_devices:
        return True  # counters are needed whatever the node
    if (
        slice_.node_name
        or slice_.all_nodes
        or slice_.node_selector is not None
        or slice_.node_selector_error
    ):
        if slice_.node_name:
            return slice_.node_name == node.name
        if slice_.all_nodes:
            return True
        if slice_.node_selector_error:
            raise AllocationError(
                f"failed to perform node selection for slice {slice_.name}: {slice_.node_selector_error}"
            )
        assert slice_.node_selector is not None
        return slice_.node_selector.matches(node)
    if slice_.per_device:
        return any(d.reachable_from(node) for d in slice_.devices)
    return False  # some future, unknown node selection mode


def gather_pools(
    slices_for_node: Iterable[CompiledSlice],
    node: NodeInfo,
    features: Features,
    slices_of_pool: Callable[[PoolId], Sequence[CompiledSlice]],
) -> list[Pool]:
    """Pools reachable from ``node`` (see module docstring for the rules).

    ``slices_for_node`` are candidate slices (node-local plus shared);
    ``slices_of_pool`` returns every slice of a pool, whatever its node.
    """
    grouped: dict[PoolId, list[CompiledSlice]] = {}
    # Without their gate, compatibility groups cannot be honoured, so a slice that declares
    # them is left out; its pool is then incomplete and none of its devices is allocated,
    # whichever of them are in use, so the outcome does not depend on allocation order.
    skip_grouped = not features.compatibility_groups
    for slice_ in slices_for_node:
        if not features.partitionable_devices and (slice_.per_device or slice_.shared_counters):
            continue
        if skip_grouped and slice_.uses_compatibility_groups:
            continue
        if not slice_targets_node(slice_, node, features):
            continue
        group = grouped.get(slice_.pool_id)
        if group is None or slice_.generation > group[0].generation:
            grouped[slice_.pool_id] = [slice_]
        elif slice_.generation == group[0].generation:
            group.append(slice_)

    plain: list[Pool] = []
    with_conditions: list[Pool] = []
    for pool_id, group in grouped.items():
        generation, wanted = group[0].generation, group[0].slice_count
        elsewhere: list[CompiledSlice] = []
        counts = {s.slice_count for s in group}
        if len(counts) > 1:
            # Beyond upstream (which trusts drivers here, kubernetes#141118): a pool
            # whose slices disagree cannot be judged complete, and saying so beats
            # silently treating it as incomplete or complete depending on slice order.
            listed = ", ".join(str(c) for c in sorted(counts))
            reason = f"slices of generation {generation} disagree on resourceSliceCount ({listed})"
            plain.append(Pool(id=pool_id, invalid=True, invalid_reason=reason))
            continue
        if len(group) != wanted:
            # Look at slices for other nodes: the pool may be complete after all,
            # or a newer generation elsewhere makes this one obsolete.
            everything = slices_of_pool(pool_id)
            if any(s.generation > generation for s in everything):
                continue
            current = [
                s
                for s in everything
                if s.generation == generation and not (skip_grouped and s.uses_compatibility_groups)
            ]
            if len(current) != wanted:
                plain.append(Pool(id=pool_id, incomplete=True))
                continue
            keys = {s.key for s in group}
            elsewhere = [s for s in current if s.key not in keys]
        pool = _build_pool(pool_id, group, elsewhere, features)
        (with_conditions if pool.has_binding_conditions else plain).append(pool)
    plain.sort(key=lambda p: p.id)
    with_conditions.sort(key=lambda p: p.id)
    return plain + with_conditions


def _build_pool(
    pool_id: PoolId, group: list[CompiledSlice], elsewhere: list[CompiledSlice], features: Features
) -> Pool:
    group = sorted(group, key=lambda s: s.name)
    if features.partitionable_devices:
        device_slices = [s for s in group if not s.shared_counters]
        # A pool's counter sets are the pool's, whichever node the slice publishing them
        # names: devices here may draw on a set published in a slice for another node.
        counter_slices = [s for s in [*group, *elsewhere] if s.shared_counters]
    else:
        device_slices, counter_slices = group, []
    seen: set[str] = set()
    for slice_ in device_slices:
        for device in slice_.devices:
            if device.name in seen:
                return Pool(
                    id=pool_id, invalid=True, invalid_reason=f"duplicate device name {device.name}"
                )
            seen.add(device.name)
    has_conditions = any(d.binding_conditions is not None for s in device_slices for d in s.devices)
    if not features.partitionable_devices:
        return Pool(id=pool_id, slices=tuple(device_slices), has_binding_conditions=has_conditions)
    counter_sets: dict[str, Mapping[str, Nanos]] = {}
    for slice_ in counter_slices:
        for set_name, counters in slice_.shared_counters:
            if set_name in counter_sets:
                return Pool(
                    id=pool_id,
                    invalid=True,
                    invalid_reason=f"duplicate counter set name {set_name}",
                )
            counter_sets[set_name] = counters
    elsewhere_devices = sorted(
        (s for s in elsewhere if not s.shared_counters), key=lambda s: s.name
    )
    for slice_ in [*device_slices, *elsewhere_devices]:
        reason = _counter_reference_problem(slice_, counter_sets)
        if reason:
            return Pool(id=pool_id, invalid=True, invalid_reason=reason)
    return Pool(
        id=pool_id,
        slices=tuple(device_slices),
        slices_elsewhere=tuple(elsewhere_devices),
        counter_sets=counter_sets,
        has_binding_conditions=has_conditions,
        compatibility_groups=features.compatibility_groups
        and any(s.uses_compatibility_groups for s in (*device_slices, *elsewhere_devices)),
    )


def _counter_reference_problem(
    slice_: CompiledSlice, counter_sets: Mapping[str, Mapping[str, Nanos]]
) -> str:
    for device in slice_.devices:
        for set_name, counters in device.consumes_counters:
            available = counter_sets.get(set_name)
            if available is None:
                return f"counter set {set_name} not found"
            for counter in counters:
                if counter not in available:
                    return f"counter {counter} not found in counter set {set_name}"
    return ""


def counters_left(pool: Pool, allocated: AllocatedDevices) -> dict[str, dict[str, Nanos]]:
    """Per counter set of the pool, what its allocated devices leave of each counter."""
    available = {name: dict(counters) for name, counters in pool.counter_sets.items()}
    for slice_ in (*pool.slices, *pool.slices_elsewhere):
        for device in slice_.devices:
            if not device.consumes_counters or not allocated.is_allocated(device.id):
                continue
            for set_name, counters in device.consumes_counters:
                target = available.get(set_name)
                if target is None:
                    continue
                for name, amount in counters.items():
                    if name in target:
                        target[name] -= amount
    return available
