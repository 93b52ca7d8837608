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


# --- one request mapping for pods whose containers ask alike ---------------------------------

SIDECAR = {"restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}


def app(requests: dict[str, Any], limits: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": requests}
    if limits is not None:
        resources["limits"] = limits
    return {"name": "app", "resources": resources}


SPECS: list[dict[str, Any]] = [
    {"containers": [app({"cpu": "500m", "memory": "512Mi"}, {"memory": "1Gi"})]},
    {"containers": [app({"cpu": "500m"}), app({"cpu": "250m", "nvidia.com/gpu": "1"})]},
    {"containers": [app({"cpu": "500m"})], "initContainers": [SIDECAR]},
    {"containers": [app({"cpu": "500m"})], "overhead": {"cpu": "100m"}},
    {"containers": [app({"cpu": "500m"})], "resources": {"requests": {"cpu": "2"}}},
    {"containers": [app({"cpu": 1})]},
    {"containers": [app({"cpu": "1"})]},
    {"containers": [app({"cpu": "1"}, {"nvidia.com/gpu": "1"})]},
    {"containers": [app({"cpu": "1"}, {"nvidia.com/gpu": "2"})]},
    {"containers": [app({"cpu": "1"}, {"cpu": "2"})]},
    {"containers": [app({"cpu": True})]},
    {"containers": [app({"cpu": "500m"}), app({"cpu": "250m"})]},
    {"containers": [app({"cpu": "250m"}), app({"cpu": "500m"})]},
    {"containers": [app({"cpu": ["not", "a", "quantity"]})]},
    {"containers": [{"name": "bare"}]},
    {},
]


def test_a_pods_scheduler_view_has_its_own_effective_request_whoever_shares() -> None:
    from operators.scheduling.model import parse_pod_needs

    for _ in range(2):  # the second time from the shared table
        for spec in SPECS:
            needs = parse_pod_needs({"metadata": {"name": "p"}, "spec": spec})
            assert needs.requests == pod_requests(spec), spec


def test_pods_whose_containers_ask_alike_share_one_request_mapping() -> None:
    from operators.scheduling.model import parse_pod_needs

    def requests(spec: dict[str, Any]) -> Any:
        return parse_pod_needs({"metadata": {"name": "p"}, "spec": spec}).requests

    first = requests({"containers": [app({"cpu": "300m"}, {"memory": "1Gi"})]})
    again = requests({"containers": [app({"cpu": "300m"}, {"memory": "1Gi"})]})
    assert first is again and first == {"cpu": 300, "memory": 2**30}
    # A value of a type a key cannot hold (a float) is not shared.
    assert requests({"containers": [app({"cpu": 0.3}, {"memory": "1Gi"})]}) is not first
    # Init containers, pod-level requests and overhead change the sum: never shared.
    with_sidecar = {"containers": [app({"cpu": "300m"})], "initContainers": [SIDECAR]}
    assert requests(with_sidecar) is not requests(with_sidecar)
