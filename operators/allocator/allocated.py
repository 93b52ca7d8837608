"""Devices that are already in use, as the search needs to see them.

Built from allocated (and assumed, in-flight) claims: exclusive devices,
shares of multi-allocatable devices, and the capacity those shares consume.
Admin-access results do not make a device busy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from operators.allocator.compiled import DeviceId
from operators.allocator.quantities import Nanos


@dataclass(frozen=True, slots=True)
class UsedDevice:
    """One allocated device result, reduced to what accounting needs."""

    device: DeviceId
    share_id: str | None = None
    consumed: Mapping[str, Nanos] | None = None  # fully qualified capacity names
    admin_access: bool = False


@dataclass(slots=True)
class AllocatedDevices:
    """Reference-counted usage, so that releasing one claim is exact."""

    exclusive: dict[DeviceId, int] = field(default_factory=dict)
    shares: dict[DeviceId, set[str]] = field(default_factory=dict)
    capacity: dict[DeviceId, dict[str, Nanos]] = field(default_factory=dict)

    @classmethod
    def of(cls, used: Iterable[UsedDevice]) -> AllocatedDevices:
        state = cls()
        for item in used:
            state.add(item)
        return state

    def add(self, item: UsedDevice) -> None:
        if item.share_id is not None:
            self.shares.setdefault(item.device, set()).add(item.share_id)
            totals = self.capacity.setdefault(item.device, {})
            for name, amount in (item.consumed or {}).items():
                totals[name] = totals.get(name, 0) + amount
        elif not item.admin_access:
            self.exclusive[item.device] = self.exclusive.get(item.device, 0) + 1

    def remove(self, item: UsedDevice) -> None:
        if item.share_id is not None:
            shares = self.shares.get(item.device)
            if shares is not None:
                shares.discard(item.share_id)
                if not shares:
                    del self.shares[item.device]
            totals = self.capacity.get(item.device)
            if totals is not None:
                for name, amount in (item.consumed or {}).items():
                    totals[name] = totals.get(name, 0) - amount
                if item.device not in self.shares:
                    del self.capacity[item.device]
        elif not item.admin_access:
            count = self.exclusive.get(item.device, 0) - 1
            if count > 0:
                self.exclusive[item.device] = count
            else:
                self.exclusive.pop(item.device, None)

    def in_use(self, device: DeviceId) -> bool:
        """Exclusively allocated."""
        return device in self.exclusive

    def capacity_in_use(self, device: DeviceId) -> Mapping[str, Nanos] | None:
        return self.capacity.get(device)

    def is_allocated(self, device: DeviceId) -> bool:
        """Allocated in any way (for counter accounting)."""
        return device in self.exclusive or device in self.shares or device in self.capacity

    def clashes(self, used: Iterable[UsedDevice]) -> list[DeviceId]:
        """The devices of ``used`` that the usage here already rules out: an exclusive
        result on a device in use in any way, a share on an exclusively used device or with
        a share id already taken, or a device twice among ``used`` itself. Admin access
        clashes with nothing."""
        seen: dict[DeviceId, set[str | None]] = {}
        out: list[DeviceId] = []
        for item in used:
            if item.admin_access:
                continue
            device = item.device
            ids = seen.setdefault(device, set())
            if device in self.exclusive or None in ids:
                out.append(device)
            elif item.share_id is None:
                if device in self.shares or ids:
                    out.append(device)
            elif item.share_id in ids or item.share_id in self.shares.get(device, ()):
                out.append(device)
            ids.add(item.share_id)
        return out
