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


def claim(namespace: str, name: str, w: Workload) -> dict[str, Any]:
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
]
