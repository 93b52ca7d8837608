"""What an allocation produces: per claim, the devices, config and node selector.

Frozen dataclasses; ``to_dict()`` gives the ``status.allocation`` JSON
(camelCase) that the operator writes, in either API group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from operators.allocator.allocated import UsedDevice
from operators.allocator.nodes import NodeSelector
from operators.allocator.quantities import Nanos
from operators.api.quantity import Quantity
from operators.api.quickinit import quick_init


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One allocated device (DeviceRequestAllocationResult)."""

    request: str  # "req" or "req/sub"
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    binding_conditions: tuple[str, ...] | None = None
    binding_failure_conditions: tuple[str, ...] | None = None
    share_id: str | None = None
    # Published capacity name -> amount (in the capacity's notation), for
    # multi-allocatable devices only.
    consumed_capacity: Mapping[str, Quantity] | None = None
    # Same amounts keyed by fully qualified names (for accounting).
    consumed_qualified: Mapping[str, Nanos] | None = None
    # The DeviceClass the request named (for quotas; not part of the written result).
    device_class: str = ""
    # Copied from the device's slice (DRAOptionalNodeOperations): the kubelet skips these
    # calls to the driver, and kube-scheduler keeps the pod off nodes that cannot.
    skip_node_operations: tuple[str, ...] = ()
    # usage(), made on first use: results are shared by pods (search.py), so is this.
    _used: UsedDevice | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def device_id(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)

    def usage(self) -> UsedDevice:
        used = self._used
        if used is None:
            used = UsedDevice(
                device=self.device_id,
                share_id=self.share_id,
                consumed=self.consumed_qualified,
                admin_access=bool(self.admin_access),
            )
            object.__setattr__(self, "_used", used)
        return used

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "request": self.request,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
        }
        if self.admin_access is not None:
            out["adminAccess"] = self.admin_access
        if self.tolerations:
            out["tolerations"] = [dict(t) for t in self.tolerations]
        if self.binding_conditions is not None:
            out["bindingConditions"] = list(self.binding_conditions)
        if self.binding_failure_conditions is not None:
            out["bindingFailureConditions"] = list(self.binding_failure_conditions)
        if self.share_id is not None:
            out["shareID"] = self.share_id
        if self.consumed_capacity:
            out["consumedCapacity"] = {
                name: str(amount) for name, amount in self.consumed_capacity.items()
            }
        if self.skip_node_operations:
            out["skipNodeOperations"] = list(self.skip_node_operations)
        return out


@dataclass(frozen=True, slots=True)
class ConfigResult:
    """One DeviceAllocationConfiguration: from the class or from the claim."""

    source: str  # "FromClass" | "FromClaim"
    requests: tuple[str, ...] | None  # None: applies to every request
    config: Mapping[str, Any]  # {"opaque": {"driver": ..., "parameters": ...}}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, **self.config}
        if self.requests:
            out["requests"] = list(self.requests)
        return out


@quick_init
@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """The allocation of one claim (AllocationResult)."""

    claim: str  # "namespace/name" (or "name")
    uid: str
    devices: tuple[DeviceResult, ...]
    config: tuple[ConfigResult, ...] = ()
    node_selector: NodeSelector | None = None

    def usage(self) -> tuple[UsedDevice, ...]:
        return tuple(d.usage() for d in self.devices)

    def to_dict(self) -> dict[str, Any]:
        """The ``status.allocation`` object (without allocationTimestamp)."""
        devices: dict[str, Any] = {"results": [d.to_dict() for d in self.devices]}
        if self.config:
            devices["config"] = [c.to_dict() for c in self.config]
        out: dict[str, Any] = {"devices": devices}
        if self.node_selector is not None:
            out["nodeSelector"] = self.node_selector.to_dict()
        return out
