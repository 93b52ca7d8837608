"""The structured allocator: which devices (and which node) a pod's claims get.

Pure and synchronous: no I/O, no kopf, no Kubernetes client. Feed an
``AllocatorState`` with slices, classes, claims and taint rules as they change,
then ask it ``allocate(claims, node)`` (upstream's Allocate, same semantics and
messages) or ``find_node(claims, nodes, policy)`` (which node, using indexes).
When nothing fits, ``explain`` says why, node by node and request by request.
"""

from operators.allocator.allocated import AllocatedDevices, UsedDevice
from operators.allocator.compiled import (
    CompiledClaim,
    CompiledClass,
    CompiledSlice,
    CompiledTaintRule,
    compile_claim,
    compile_class,
    compile_slice,
    compile_taint_rule,
)
from operators.allocator.errors import (
    AllocationError,
    InvalidPoolsError,
    NodeAllocationError,
    SearchAborted,
    SearchBudgetExceeded,
)
from operators.allocator.features import Features
from operators.allocator.funnel import Explanation, NodeReason, RequestFunnel
from operators.allocator.nodes import NodeInfo, NodeSelector
from operators.allocator.placement import POLICIES, Placement
from operators.allocator.results import ClaimAllocation, ConfigResult, DeviceResult
from operators.allocator.search import DEFAULT_BUDGET, MAX_DEVICES_PER_CLAIM
from operators.allocator.state import AllocatorState, allocate, claim_key, usage_from_status

__all__ = [
    "DEFAULT_BUDGET",
    "MAX_DEVICES_PER_CLAIM",
    "POLICIES",
    "AllocatedDevices",
    "AllocationError",
    "AllocatorState",
    "ClaimAllocation",
    "CompiledClaim",
    "CompiledClass",
    "CompiledSlice",
    "CompiledTaintRule",
    "ConfigResult",
    "DeviceResult",
    "Explanation",
    "Features",
    "InvalidPoolsError",
    "NodeAllocationError",
    "NodeInfo",
    "NodeReason",
    "NodeSelector",
    "Placement",
    "RequestFunnel",
    "SearchAborted",
    "SearchBudgetExceeded",
    "UsedDevice",
    "allocate",
    "claim_key",
    "compile_claim",
    "compile_class",
    "compile_slice",
    "compile_taint_rule",
    "usage_from_status",
]
