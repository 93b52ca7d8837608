"""Pod resource requests and node allocatable, counted the way kube-scheduler counts them.

A pod's request is not simply the sum of its containers: init containers run one at a time
before the app containers, sidecars (init containers with ``restartPolicy: Always``) keep
running beside everything that starts after them, and the pod overhead of its runtime class
comes on top. kube-scheduler's NodeResourcesFit filter compares that effective request with
what is left of the node's allocatable; dralloc must compute the same number, or it pins
pods to nodes the scheduler refuses.

CPU is counted in millicores, every other resource in whole units (bytes for memory), as
the scheduler does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from operators.api.quantity import Quantity, QuantityParseError

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

Resources = Mapping[str, int]
"""Resource name -> amount (millicores for cpu, whole units for the rest)."""

# Resources a pod may also request for itself (spec.resources, PodLevelResources).
_POD_LEVEL = (CPU, MEMORY)
HUGEPAGES_PREFIX = "hugepages-"


def amount(name: str, value: Any) -> int:
    """One quantity in the scheduler's unit for ``name``; an unreadable value counts as 0
    (the API server validates quantities, so only hand-written snapshots get here)."""
    try:
        quantity = Quantity.coerce(value)
    except (QuantityParseError, TypeError):
        return 0
    return quantity.milli_value() if name == CPU else quantity.value()


def parse_resource_list(data: Mapping[str, Any] | None) -> dict[str, int]:
    """A core/v1 ResourceList (``{"cpu": "2", "memory": "4Gi"}``) in scheduler units."""
    return {str(name): amount(str(name), value) for name, value in (data or {}).items()}


def container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    """A container's requests, with the API server's defaulting: a resource that has a
    limit but no request is requested at its limit."""
    resources = container.get("resources") or {}
    requests = parse_resource_list(resources.get("requests"))
    for name, value in parse_resource_list(resources.get("limits")).items():
        requests.setdefault(name, value)
    return requests


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def _max_into(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, value in other.items():
        if value > total.get(name, 0):
            total[name] = value


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """The pod's effective request, as kube-scheduler computes it from the pod spec.

    - app containers run together: their requests add up;
    - sidecars run from their start to the pod's end: each adds to everything after it,
      including the app containers;
    - a regular init container runs alone beside the sidecars started before it;
    - the pod needs the largest of those phases; spec.resources (pod-level requests)
      replaces the containers' cpu and memory when given; spec.overhead is added last.
    """
    total: dict[str, int] = {}
    for container in spec.get("containers") or ():
        _add(total, container_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or ():
        requests = container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            _max_into(init_peak, sidecars)
        else:
            phase = dict(sidecars)
            _add(phase, requests)
            _max_into(init_peak, phase)
    _add(total, sidecars)
    _max_into(total, init_peak)
    pod_level = parse_resource_list((spec.get("resources") or {}).get("requests"))
    for name, value in pod_level.items():
        if name in _POD_LEVEL or name.startswith(HUGEPAGES_PREFIX):
            total[name] = value
    _add(total, parse_resource_list(spec.get("overhead")))
    # In the order the scheduler reports shortfalls, so reasons need no sorting later.
    return {name: total[name] for name in _ordered(total) if total[name]}


def insufficient(
    requested: Mapping[str, int],
    allocatable: Mapping[str, int],
    used: Mapping[str, int],
    pods_used: int,
) -> list[str]:
    """NodeResourcesFit's reasons for one node, in the scheduler's words ('' list = fits).

    A resource the node does not list is allocatable 0 there, so a pod that asks for an
    extended resource a node lacks gets ``Insufficient example.com/foo``. ``requested`` is
    iterated in its own order (:func:`pod_requests` gives the scheduler's).
    """
    reasons: list[str] = []
    if PODS in allocatable and pods_used + 1 > allocatable[PODS]:
        reasons.append("Too many pods")
    for name, want in requested.items():
        if want > 0 and name != PODS and want > allocatable.get(name, 0) - used.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


def _ordered(names: Iterable[str]) -> list[str]:
    """cpu, memory, ephemeral-storage first (the scheduler's order), then by name."""
    first = (CPU, MEMORY, EPHEMERAL_STORAGE)
    names = list(names)
    return [n for n in first if n in names] + sorted(n for n in names if n not in first)
