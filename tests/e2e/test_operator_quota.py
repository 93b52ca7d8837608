"""DeviceQuota end to end: the allocator enforces it on what it allocates, in both API modes.

Each test publishes its own devices (with memory and a model attribute), sets a quota in the
test's namespace, and checks what the user sees: pods bound while the quota has room, the
next one gated with the quota named in its Event and condition, the quota's status, and the
room given back when a pod ends, and a quota lowered below its usage saying so.
"""

from __future__ import annotations

from typing import Any

import pytest

from .kube_helpers import Testbed, unique_name, wait_for
from .operator_fixtures import (
    GATE,
    GROUP,
    OperatorProcess,
    Pool,
    events,
    get,
    operator,
    pod,
    template,
    wait_bound,
)

__all__ = ["operator"]  # the module-scoped fixture, re-exported for pytest

pytestmark = pytest.mark.api_modes

CONDITION = f"{GROUP}/DevicesAllocated"


def gpu_pool(testbed: Testbed, models: list[str], nodes: int = 1) -> Pool:
    """Nodes with one GPU of 80Gi per model given, and their DeviceClass."""
    label = unique_name("quota")
    names = testbed.create_nodes(nodes, {"e2e-pool": label}, prefix=label)
    driver = f"{label}.example.com"
    mode = testbed.api_mode
    slices = [
        {
            "apiVersion": mode.api_version,
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpus"},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "attributes": {"model": {"string": model}},
                        "capacity": {"memory": {"value": "80Gi"}},
                    }
                    for i, model in enumerate(models)
                ],
            },
        }
        for node in names
    ]
    testbed.apply(
        {
            "apiVersion": mode.api_version,
            "kind": "DeviceClass",
            "metadata": {"name": label},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
        *slices,
    )
    return Pool(testbed, driver, label, label, names)


def quota(namespace: str, pool: Pool, *selectors: str, **hard: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "DeviceQuota",
        "metadata": {"name": "gpus", "namespace": namespace},
        "spec": {
            "deviceClassName": pool.device_class,
            "selectors": [{"cel": {"expression": e}} for e in selectors],
            "hard": hard,
        },
    }


def quota_status(testbed: Testbed, namespace: str) -> dict[str, Any]:
    obj = get(testbed, f"devicequotas.{GROUP}", "gpus", namespace) or {}
    return dict(obj.get("status") or {})


def gpu_pod(namespace: str, name: str, pool: Pool, claim_template: str) -> dict[str, Any]:
    return pod(
        namespace, name, pool, [{"name": "gpu", "resourceClaimTemplateName": claim_template}]
    )


def refused(testbed: Testbed, namespace: str, name: str, words: str) -> str:
    """Waits until the pod's FailedAllocation Event says ``words``; checks the pod is still
    gated and its condition says the same; returns the Event's message."""

    def message() -> str | None:
        for event in events(testbed, namespace, name, "FailedAllocation"):
            if words in event["message"]:
                return str(event["message"])
        return None

    text = str(wait_for(f"pod {name} refused with {words!r}", message, timeout=60))
    obj = get(testbed, "pod", name, namespace) or {}
    assert GATE in [g["name"] for g in obj["spec"].get("schedulingGates") or []]
    conditions = {c["type"]: c for c in obj.get("status", {}).get("conditions") or []}
    assert words in conditions[CONDITION]["message"], conditions[CONDITION]
    return text


def used(testbed: Testbed, namespace: str) -> dict[str, Any]:
    return dict(quota_status(testbed, namespace).get("used") or {})


def test_quota_by_device_count_gates_the_next_pod_and_releases_on_delete(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = gpu_pool(testbed, ["a100"] * 2, nodes=2)
    testbed.apply(quota(namespace, pool, devices=3), template(namespace, "one", pool))
    for name in ("p1", "p2", "p3"):
        testbed.apply(gpu_pod(namespace, name, pool, "one"))
        wait_bound(testbed, namespace, name)
    testbed.apply(gpu_pod(namespace, "p4", pool, "one"))
    words = f"DeviceQuota {namespace}/gpus: devices 3 of 3 used, claim needs 1"
    refused(testbed, namespace, "p4", words)
    wait_for("status.used", lambda: used(testbed, namespace).get("devices") == 3, timeout=30)
    status = quota_status(testbed, namespace)
    valid = {c["type"]: c for c in status["conditions"]}["Valid"]
    assert (valid["status"], valid["reason"]) == ("True", "Enforced")
    testbed.kubectl("delete", "pod", "p1", f"--namespace={namespace}", "--wait=false")
    wait_bound(testbed, namespace, "p4")  # p1's device left the quota with its claim

    # Lowered below what is allocated: the quota says so (nothing is taken back).
    testbed.kubectl(
        "patch", f"devicequotas.{GROUP}", "gpus", f"--namespace={namespace}", "--type=merge",
        "-p", '{"spec": {"hard": {"devices": 1}}}',
    )  # fmt: skip

    def exceeded() -> dict[str, Any] | None:
        found = {c["type"]: c for c in quota_status(testbed, namespace).get("conditions") or []}
        over = found.get("Exceeded")
        return over if over and over["status"] == "True" else None

    over = wait_for("the Exceeded condition", exceeded, timeout=30)
    assert "devices: 3 used, hard 1" in over["message"], over
    warned = wait_for(
        "the quota's OverLimit Event",
        lambda: events(testbed, namespace, "gpus", "OverLimit"),
        timeout=30,
    )
    assert "devices: 3 used, hard 1" in warned[0]["message"], warned


def test_quota_by_capacity_counts_device_memory(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = gpu_pool(testbed, ["a100"] * 4)
    testbed.apply(
        quota(namespace, pool, capacity={"memory": "200Gi"}),
        template(namespace, "two", pool, count=2),
        template(namespace, "one", pool),
    )
    testbed.apply(gpu_pod(namespace, "big", pool, "two"))
    wait_bound(testbed, namespace, "big")
    testbed.apply(gpu_pod(namespace, "more", pool, "one"))
    refused(
        testbed, namespace, "more",
        f"DeviceQuota {namespace}/gpus: memory 160Gi of 200Gi used, claim needs 80Gi",
    )  # fmt: skip
    wait_for(
        "memory in status.used",
        lambda: used(testbed, namespace).get("capacity") == {"memory": "160Gi"},
        timeout=30,
    )


def test_quota_by_selector_counts_only_the_selected_devices(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = gpu_pool(testbed, ["a100", "a100", "h100", "h100"])
    a100 = f'device.attributes["{pool.driver}"].model == "a100"'
    testbed.apply(
        quota(namespace, pool, a100, devices=1),
        template(namespace, "three", pool, count=3),
        template(namespace, "an-a100", pool, selectors=[{"cel": {"expression": a100}}]),
    )
    testbed.apply(gpu_pod(namespace, "mixed", pool, "three"))
    wait_bound(testbed, namespace, "mixed")  # one A100 and both H100s: within the quota
    wait_for("status.used", lambda: used(testbed, namespace).get("devices") == 1, timeout=30)
    testbed.apply(gpu_pod(namespace, "wants-a100", pool, "an-a100"))
    refused(
        testbed, namespace, "wants-a100",
        f"DeviceQuota {namespace}/gpus: devices 1 of 1 used, claim needs 1",
    )  # fmt: skip


def test_two_pods_racing_for_the_last_unit_of_quota(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = gpu_pool(testbed, ["a100"] * 2)
    testbed.apply(quota(namespace, pool, devices=1), template(namespace, "one", pool))
    testbed.apply(gpu_pod(namespace, "r1", pool, "one"), gpu_pod(namespace, "r2", pool, "one"))
    words = f"DeviceQuota {namespace}/gpus: devices 1 of 1 used, claim needs 1"

    def outcome() -> tuple[str, str] | None:
        bound = [
            n
            for n in ("r1", "r2")
            if (get(testbed, "pod", n, namespace) or {})["spec"].get("nodeName")
        ]
        told = [
            n
            for n in ("r1", "r2")
            if any(words in e["message"] for e in events(testbed, namespace, n, "FailedAllocation"))
        ]
        return (bound[0], told[0]) if len(bound) == 1 and told and told != bound else None

    winner, loser = wait_for("one pod bound, one told about the quota", outcome, timeout=60)
    refused(testbed, namespace, loser, words)
    assert bound_count(testbed, namespace) == 1
    assert (get(testbed, "pod", winner, namespace) or {})["spec"]["nodeName"]


def bound_count(testbed: Testbed, namespace: str) -> int:
    found = testbed.get("pods", f"--namespace={namespace}") or {}
    return sum(1 for p in found.get("items") or [] if p["spec"].get("nodeName"))


def test_invalid_selector_is_reported_and_holds_back_the_class(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = gpu_pool(testbed, ["a100"])
    testbed.apply(
        quota(namespace, pool, "device.driver ==", devices=5), template(namespace, "one", pool)
    )

    def valid() -> dict[str, Any] | None:
        conditions = {
            c["type"]: c for c in quota_status(testbed, namespace).get("conditions") or []
        }
        return conditions.get("Valid")

    condition = wait_for("the Valid condition", valid, timeout=30)
    assert (condition["status"], condition["reason"]) == ("False", "InvalidSelector"), condition
    assert "selector #0: CEL compile error" in condition["message"]
    testbed.apply(gpu_pod(namespace, "held", pool, "one"))
    refused(testbed, namespace, "held", f"DeviceQuota {namespace}/gpus is invalid (selector #0")
