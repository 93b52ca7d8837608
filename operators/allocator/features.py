"""Feature gates that change what the allocator does.

Upstream maps Kubernetes feature gates onto a small set of allocator flags;
this module is that mapping. The defaults are the upstream defaults of the
newest release (GA and beta features on, alpha features off; one beta gate is
off too, see ``fractional_capacity_range``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

# Kubernetes feature-gate name -> Features field it switches.
GATE_TO_FIELD: Mapping[str, str] = {
    "DRAAdminAccess": "admin_access",
    "DRAPrioritizedList": "prioritized_list",
    "DRAPartitionableDevices": "partitionable_devices",
    "DRADeviceTaints": "device_taints",
    "DRADeviceTaintRules": "device_taint_rules",
    "DRAConsumableCapacity": "consumable_capacity",
    "DRADeviceBindingConditions": "device_binding_conditions",
    "DRAListTypeAttributes": "list_type_attributes",
    "DRADeviceCompatibilityGroups": "compatibility_groups",
    "DRAFractionalCapacityRange": "fractional_capacity_range",
    "DRADerivedAttributes": "derived_attributes",
    "DRAOptionalNodeOperations": "optional_node_operations",
}


@dataclass(frozen=True, slots=True)
class Features:
    """Allocator flags; each one is named after the gate that drives it."""

    admin_access: bool = True
    prioritized_list: bool = True
    partitionable_devices: bool = True
    device_taints: bool = True
    device_taint_rules: bool = True
    consumable_capacity: bool = True
    # Upstream calls this "DeviceBindingAndStatus": it needs both
    # DRADeviceBindingConditions and DRAResourceClaimDeviceStatus (GA).
    device_binding_conditions: bool = True
    list_type_attributes: bool = False
    # Alpha in 1.37. Off, slices that declare groups are left out (their pools incomplete).
    compatibility_groups: bool = False
    # Beta in 1.37, but on only with --min-compatibility-version=1.37, which a 1.37 control
    # plane does not have by default (it stays compatible with 1.36): range steps of consumable
    # capacity are counted in whole units, a 100m step as a step of 1 (capacity.py).
    fractional_capacity_range: bool = False
    # Alpha in 1.37: constraints compare values computed per device by a request's CEL.
    derived_attributes: bool = False
    # Alpha in 1.37: devices whose slice skips node operations (skipNodeOperations) need
    # a node that declares DRAOptionalNodeOperations.
    optional_node_operations: bool = False

    @classmethod
    def none(cls) -> Features:
        """Every optional feature off: the plain GA allocator."""
        return cls(**{f.name: False for f in fields(cls)})

    @classmethod
    def only(cls, *names: str) -> Features:
        """Only the named Features fields on (tests and upstream parity)."""
        unknown = set(names) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown feature(s): {sorted(unknown)}")
        return cls(**{f.name: f.name in names for f in fields(cls)})

    @classmethod
    def from_gates(cls, gates: Mapping[str, bool]) -> Features:
        """Defaults overridden by Kubernetes gate names, e.g. {"DRAListTypeAttributes": True}."""
        values = {f.name: getattr(cls(), f.name) for f in fields(cls)}
        for gate, enabled in gates.items():
            if gate not in GATE_TO_FIELD:
                raise ValueError(f"unknown feature gate {gate!r}")
            values[GATE_TO_FIELD[gate]] = bool(enabled)
        return cls(**values)
