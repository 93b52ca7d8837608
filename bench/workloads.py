"""The scheduler_perf DRA workloads (upstream test/integration/scheduler_perf/dra), as data.

Objects are ``resource.k8s.io/v1`` JSON built the way upstream's templates
build them: one ResourceSlice per node named after the node, devices
``instance-N`` with model/family/driverVersion/numa attributes and 1Gi of
memory, a DeviceClass selecting the test driver, and claims with one request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DRIVER = "test-driver.cdi.k8s.io"
CLASS = "test-class"


@dataclass(frozen=True)
class Workload:
    name: str
    nodes_with_dra: int
    nodes_without_dra: int
    devices_per_node: int  # maxClaimsPerNode
    init_pods: int = 0  # pods (or claims, for steady state) allocated before measuring
    measure_pods: int = 0
    steady_state: bool = False  # keep 10 pods in flight, delete each once placed
    duration: float = 0.0  # seconds of steady-state measurement
    pods_per_claim: int = 1  # SchedulingWithResourceClaim shares one claim between 5 pods
    first_available: bool = False  # prioritizedlist/: sub-0 asks for a class without devices
    tolerations: bool = False  # devicetaints/: every device tainted NoSchedule, tolerated
    kind: str = "gpu"  # "gpu", "partitionable" or "backtracking" (partitionabledevices/)
    resource_slices: int = 0  # pools of partitionable devices (partitionabledevices/)


def node_name(i: int) -> str:
    return f"scheduler-perf-dra-{i}"


def node_names(w: Workload) -> list[str]:
    with_dra = [node_name(i) for i in range(w.nodes_with_dra)]
    without = [f"scheduler-perf-{i}" for i in range(w.nodes_without_dra)]
    return with_dra + without


def resource_slice(node: str, devices: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": node, "uid": f"uid-{node}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"instance-{i}",
                    "attributes": {
                        "model": {"string": "A100"},
                        "family": {"string": "GPU"},
                        "driverVersion": {"version": "1.2.3"},
                        "dra.example.com/numa": {"int": i},
                    },
                    "capacity": {"memory": {"value": "1Gi"}},
                }
                for i in range(devices)
            ],
        },
    }


def device_class(name: str = CLASS) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def empty_class(name: str) -> dict[str, Any]:
    """A class that matches no device (the prioritized-list workload's first choice)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "no-such-driver"'}}]},
    }


def taint_all_rule() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "taint-all-devices"},
        "spec": {
            "deviceSelector": {"driver": DRIVER},
            "taint": {"key": "example.com/taint", "value": "tainted", "effect": "NoSchedule"},
        },
    }


NODE_LABELS = {"node-with-dra": "true"}
_ON_DRA_NODES = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node-with-dra", "operator": "In", "values": ["true"]}]}
    ]
}


def _counters(values: dict[str, str]) -> dict[str, Any]:
    return {k: {"value": v} for k, v in values.items()}


def partitionable_slices(i: int) -> list[dict[str, Any]]:
    """One pool: a counter set (counter1..4 = 1) and six partitions consuming from it."""
    pool = {"name": f"pool-{i}", "generation": 0, "resourceSliceCount": 2}
    shapes = [
        ("device-2-counters-1", True, 2, ("counter1", "counter2")),
        ("device-2-counters-2", False, 2, ("counter3", "counter4")),
        *((f"device-1-counter-{k}", False, 1, (f"counter{k}",)) for k in range(1, 5)),
    ]
    devices = [
        {
            "name": name,
            "attributes": {"preallocate": {"bool": pre}, "dra.example.com/slice": {"int": i}},
            "capacity": {"counters": {"value": str(size)}},
            "consumesCounters": [
                {"counterSet": "counter-set", "counters": _counters(dict.fromkeys(used, "1"))}
            ],
        }
        for name, pre, size, used in shapes
    ]
    common = {"driver": DRIVER, "pool": pool, "nodeSelector": _ON_DRA_NODES}
    return [
        {
            "metadata": {"name": f"resourceslice-countersets-{i}", "uid": f"cs-{i}"},
            "spec": {
                **common,
                "sharedCounters": [
                    {
                        "name": "counter-set",
                        "counters": _counters({f"counter{k}": "1" for k in range(1, 5)}),
                    }
                ],
            },
        },
        {
            "metadata": {"name": f"resourceslice-{i}", "uid": f"dev-{i}"},
            "spec": {**common, "devices": devices},
        },
    ]


def backtracking_slices(i: int) -> list[dict[str, Any]]:
    """Eight partitions; device-1 needs 20Gi of a 70Gi counter, the others 10Gi: 7 fit only without device-1."""
    pool = {"name": f"pool-{i}", "generation": 0, "resourceSliceCount": 2}
    common = {"driver": DRIVER, "pool": pool, "nodeSelector": _ON_DRA_NODES}
    devices = [
        {
            "name": f"device-{k}",
            "consumesCounters": [
                {"counterSet": "counter-set-for-cpu", "counters": _counters({f"cpu{k}": "1"})},
                {
                    "counterSet": "counter-set-for-mem",
                    "counters": _counters({"mem": "20Gi" if k == 1 else "10Gi"}),
                },
            ],
        }
        for k in range(1, 9)
    ]
    return [
        {
            "metadata": {"name": f"countersets-{i}", "uid": f"cs-{i}"},
            "spec": {
                **common,
                "sharedCounters": [
                    {
                        "name": "counter-set-for-cpu",
                        "counters": _counters({f"cpu{k}": "1" for k in range(1, 9)}),
                    },
                    {"name": "counter-set-for-mem", "counters": _counters({"mem": "70Gi"})},
                ],
            },
        },
        {
            "metadata": {"name": f"devices-{i}", "uid": f"dev-{i}"},
            "spec": {**common, "devices": devices},
        },
    ]


PREALLOCATE = f"device.capacity['{DRIVER}'].counters.compareTo(quantity('2')) >= 0 && device.attributes['{DRIVER}'].preallocate"


def claim(namespace: str, name: str, w: Workload) -> dict[str, Any]:
    meta = {
        "name": name,
        "namespace": namespace,
        "uid": f"{namespace}-{name}",
        "resourceVersion": "1",
    }
    if w.kind == "partitionable":
        if namespace == "init":
            init = {"deviceClassName": CLASS, "selectors": [{"cel": {"expression": PREALLOCATE}}]}
            devices: dict[str, Any] = {"requests": [{"name": "req-0", "exactly": init}]}
        else:
            devices = {
                "requests": [{"name": "req-0", "exactly": {"deviceClassName": CLASS, "count": 2}}],
                "constraints": [{"matchAttribute": "dra.example.com/slice"}],
            }
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": meta,
            "spec": {"devices": devices},
        }
    if w.kind == "backtracking":
        devices = {
            "requests": [{"name": "req-0", "exactly": {"deviceClassName": CLASS, "count": 7}}]
        }
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": meta,
            "spec": {"devices": devices},
        }
    if w.first_available:
        request: dict[str, Any] = {
            "name": "req-0",
            "firstAvailable": [
                {"name": "sub-0", "deviceClassName": "no-such-class"},
                {"name": "sub-1", "deviceClassName": CLASS},
            ],
        }
    else:
        exactly: dict[str, Any] = {"deviceClassName": CLASS}
        if w.tolerations:
            exactly["tolerations"] = [{"key": "example.com/taint", "operator": "Exists"}]
        request = {"name": "req-0", "exactly": exactly}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"{namespace}-{name}",
            "resourceVersion": "1",
        },
        "spec": {"devices": {"requests": [request]}},
    }


WORKLOADS = [
    Workload("SchedulingWithResourceClaimTemplate/fast", 1, 1, 10, 0, 10),
    Workload("SchedulingWithResourceClaimTemplate/2000pods_100nodes", 100, 0, 20, 1000, 1000),
    Workload("SchedulingWithResourceClaimTemplate/2000pods_200nodes", 200, 0, 10, 1000, 1000),
    Workload("SchedulingWithResourceClaimTemplate/5000pods_500nodes", 500, 0, 10, 2500, 2500),
    Workload(
        "SteadyStateClusterResourceClaimTemplate/empty_100nodes",
        100,
        0,
        10,
        0,
        steady_state=True,
        duration=2.0,
    ),
    Workload(
        "SteadyStateClusterResourceClaimTemplate/empty_500nodes",
        500,
        0,
        10,
        0,
        steady_state=True,
        duration=2.0,
    ),
    Workload(
        "SteadyStateClusterResourceClaimTemplate/half_500nodes",
        500,
        0,
        10,
        2500,
        steady_state=True,
        duration=2.0,
    ),
    Workload(
        "SteadyStateClusterResourceClaimTemplate/full_100nodes",
        100,
        0,
        10,
        990,
        steady_state=True,
        duration=2.0,
    ),
    Workload(
        "SteadyStateClusterResourceClaimTemplate/full_500nodes",
        500,
        0,
        10,
        4990,
        steady_state=True,
        duration=2.0,
    ),
    Workload(
        "SchedulingWithResourceClaim/2000pods_100nodes", 100, 0, 4, 1000, 1000, pods_per_claim=5
    ),
    Workload(
        "SteadyStateClusterResourceClaimTemplateFirstAvailable/100nodes",
        100,
        0,
        10,
        500,
        steady_state=True,
        duration=2.0,
        first_available=True,
    ),
    Workload(
        "SchedulingWithResourceClaimTemplateToleration/100nodes",
        100,
        0,
        10,
        0,
        1000,
        tolerations=True,
    ),
    Workload(
        "SteadyStateClusterResourceClaimTemplatePartitionable/fast",
        1,
        1,
        0,
        10,
        steady_state=True,
        duration=2.0,
        kind="partitionable",
        resource_slices=10,
    ),
    Workload(
        "SteadyStateClusterResourceClaimTemplatePartitionable/100nodes_200slices",
        100,
        0,
        0,
        200,
        steady_state=True,
        duration=2.0,
        kind="partitionable",
        resource_slices=200,
    ),
    Workload(
        "SteadyStateClusterResourceClaimTemplatePartitionableBacktracking/fast",
        1,
        1,
        0,
        0,
        steady_state=True,
        duration=2.0,
        kind="backtracking",
        resource_slices=1,
    ),
]
