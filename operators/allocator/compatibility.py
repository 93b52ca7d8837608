"""Device compatibility groups (DRADeviceCompatibilityGroups): who may share a counter set.

A partitionable device names, per counter set it draws from, up to two groups (opaque to
the scheduler: a driver's way to say "these partitions cannot run side by side", e.g.
different partitioning modes of one GPU). Devices drawing from one counter set at the same
time must have a group in common; a device that names none goes only with others that name
none. Counters alone cannot say this: two partitions may fit the counters and still exclude
each other.

What the devices on a counter set have in common is kept per pool and set: seeded from the
devices already allocated there (their groups are read from their slices, as their counters
are, since a claim's result does not record them), then narrowed by each device the search
takes. The values are immutable, so a take is undone by putting the old value back; the
search undoes takes in the reverse order it made them, which the tracker relies on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from operators.allocator.allocated import AllocatedDevices
from operators.allocator.compiled import CompiledDevice, DeviceId, PoolId
from operators.allocator.pools import Pool

NO_GROUPS: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Common:
    """What the devices on one counter set have in common (there is at least one).

    ``ungrouped``: none of them names a group; an empty ``groups`` alone could not say
    that, as it is also what devices with disjoint groups would leave.
    """

    ungrouped: bool
    groups: frozenset[str]

    @classmethod
    def of(cls, groups: frozenset[str]) -> Common:
        """The first device on the set."""
        return cls(not groups, groups)

    def admits(self, groups: frozenset[str]) -> bool:
        if not groups:
            return self.ungrouped
        return not self.ungrouped and not self.groups.isdisjoint(groups)

    def with_device(self, groups: frozenset[str]) -> Common:
        """After one more device. One without groups changes nothing, nor does a grouped
        one next to ungrouped ones: admitted devices cannot do either; allocated ones can
        be mixed like that once a driver changed its slices, and the first ones decide."""
        if self.ungrouped or not groups:
            return self
        return Common(False, self.groups & groups)


def groups_of(device: CompiledDevice, index: int) -> frozenset[str]:
    """The groups of the device's ``index``-th counter consumption."""
    groups = device.compatibility_groups
    return groups[index] if groups else NO_GROUPS


def allocated_common(pool: Pool, allocated: AllocatedDevices) -> dict[str, Common]:
    """Per counter set of the pool, what its allocated devices have in common."""
    out: dict[str, Common] = {}
    for slice_ in (*pool.slices, *pool.slices_elsewhere):
        for device in slice_.devices:
            if not device.consumes_counters or not allocated.is_allocated(device.id):
                continue
            for i, (set_name, _) in enumerate(device.consumes_counters):
                groups = groups_of(device, i)
                found = out.get(set_name)
                out[set_name] = Common.of(groups) if found is None else found.with_device(groups)
    return out


# Counter set -> what its devices had in common before a take (None: no device yet).
_Before = list[tuple[str, Common | None]]


@dataclass(slots=True)
class GroupTracker:
    """The common groups per pool and counter set during one search."""

    common: dict[PoolId, dict[str, Common]] = field(default_factory=dict)
    # One entry per take not yet given back, newest last.
    taken: list[tuple[DeviceId, PoolId, _Before]] = field(default_factory=list)

    def take(self, device: CompiledDevice, pool: Pool, allocated: AllocatedDevices) -> bool:
        """Whether the device goes with those on each of its counter sets; if so it is
        recorded there (until ``give_back``)."""
        sets = self.common.get(pool.id)
        if sets is None:
            sets = self.common[pool.id] = allocated_common(pool, allocated)
        before: _Before = []
        for i, (set_name, _) in enumerate(device.consumes_counters):
            groups = groups_of(device, i)
            found = sets.get(set_name)
            if found is not None and not found.admits(groups):
                _restore(sets, before)
                return False
            before.append((set_name, found))
            sets[set_name] = Common.of(groups) if found is None else found.with_device(groups)
        self.taken.append((device.id, pool.id, before))
        return True

    def give_back(self, device: CompiledDevice) -> None:
        """Undo the newest take, which must be this device's."""
        device_id, pool_id, before = self.taken.pop()
        assert device_id == device.id, "compatibility groups given back out of order"
        _restore(self.common[pool_id], before)


def _restore(sets: dict[str, Common], before: _Before) -> None:
    for set_name, found in reversed(before):
        if found is None:
            del sets[set_name]
        else:
            sets[set_name] = found
