"""Pod requests as kube-scheduler computes them (init containers, sidecars, overhead)."""

from __future__ import annotations

from typing import Any

from operators.scheduling.resources import container_requests, insufficient, pod_requests

GI = 1024**3


def c(cpu: str | None = None, memory: str | None = None, **extra: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "resources": {"requests": requests}, **extra}


def test_app_containers_add_up_in_scheduler_units() -> None:
    spec = {"containers": [c("500m", "1Gi"), c("1.5", "512Mi")]}
    assert pod_requests(spec) == {"cpu": 2000, "memory": GI + GI // 2}


def test_limits_without_requests_are_the_request() -> None:
    container = {"resources": {"limits": {"cpu": "2", "example.com/gpu": "1"}}}
    assert container_requests(container) == {"cpu": 2000, "example.com/gpu": 1}
    both = {"resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "1"}}}
    assert container_requests(both) == {"cpu": 1000}


def test_a_regular_init_container_runs_alone() -> None:
    # app: 1 cpu; init: 3 cpu before it -> the pod needs 3 (the larger phase), memory from app
    spec = {"containers": [c("1", "1Gi")], "initContainers": [c("3", "256Mi")]}
    assert pod_requests(spec) == {"cpu": 3000, "memory": GI}


def test_sidecars_run_beside_everything_after_them() -> None:
    sidecar = c("500m", restartPolicy="Always")
    spec = {
        "initContainers": [c("2"), sidecar, c("2")],
        "containers": [c("1")],
    }
    # phases: init#0 alone 2; init#2 beside the sidecar 2.5; app + sidecar 1.5 -> 2.5
    assert pod_requests(spec)["cpu"] == 2500
    spec = {"initContainers": [sidecar, c("1")], "containers": [c("3")]}
    assert pod_requests(spec)["cpu"] == 3500  # the app runs beside the sidecar


def test_overhead_and_pod_level_requests() -> None:
    spec = {
        "containers": [c("1", "1Gi"), c("1")],
        "resources": {"requests": {"cpu": "4"}},
        "overhead": {"cpu": "250m", "memory": "100Mi"},
    }
    assert pod_requests(spec) == {"cpu": 4250, "memory": GI + 100 * 1024**2}


def test_insufficient_names_each_resource_and_the_pod_count() -> None:
    allocatable = {"cpu": 2000, "memory": 8 * GI, "pods": 2, "example.com/foo": 1}
    used = {"cpu": 1500, "memory": GI}
    assert insufficient({"cpu": 500}, allocatable, used, 1) == []
    assert insufficient({"cpu": 501, "memory": 8 * GI}, allocatable, used, 1) == [
        "Insufficient cpu",
        "Insufficient memory",
    ]
    assert insufficient({"cpu": 1}, allocatable, used, 2) == ["Too many pods"]
    assert insufficient({"example.com/bar": 1}, allocatable, {}, 0) == [
        "Insufficient example.com/bar"
    ]
