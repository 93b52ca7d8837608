"""Priority preemption for devices end to end, in both API modes (``--preemption``).

A node with one device, held by a pod of a low PriorityClass: a pod of a high class gets it.
The victim is held in Terminating by a finalizer of the test (its grace period, as long as
the test likes): meanwhile the preemptor is told what it waits for and its nominated node, and
a third pod asking for the same device does not get it once it is free. Pods of equal
priority, or with ``preemptionPolicy: Never``, wait and say why; a holder a disruption budget
protects is passed over while another exists; a gang goes whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from .kube_helpers import Testbed, unique_name, wait_for
from .operator_fixtures import (
    GATE,
    GROUP,
    OperatorProcess,
    Pool,
    allocated_devices,
    events,
    get,
    make_pool,
    pod,
    running_operator,
    template,
    wait_bound,
)

pytestmark = pytest.mark.api_modes

CONDITION = f"{GROUP}/DevicesAllocated"
HOLD = "e2e.dralloc.dev/hold"


@pytest.fixture(scope="module")
def operator(
    testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from running_operator(testbed, tmp_path_factory, env={"DRALLOC_PREEMPTION": "true"})


@pytest.fixture(scope="module")
def classes(testbed: Testbed) -> dict[str, str]:
    """PriorityClasses of this module: low (0), mid (100), high (1000), high that never
    preempts."""
    prefix = unique_name("e2e-prio")
    made = {
        "low": (0, "PreemptLowerPriority"),
        "mid": (100, "PreemptLowerPriority"),
        "high": (1000, "PreemptLowerPriority"),
        "never": (1000, "Never"),
    }
    testbed.apply(
        *(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": f"{prefix}-{name}"},
                "value": value,
                "preemptionPolicy": policy,
            }
            for name, (value, policy) in made.items()
        )
    )
    return {name: f"{prefix}-{name}" for name in made}


def gpu_pod(
    namespace: str, name: str, pool: Pool, priority_class: str, **metadata: Any
) -> dict[str, Any]:
    body = pod(
        namespace,
        name,
        pool,
        [{"name": "gpu", "resourceClaimTemplateName": "one"}],
        priorityClassName=priority_class,
    )
    body["metadata"].update(metadata)
    return body


def on_node(node: str) -> dict[str, Any]:
    """Required node affinity to one node, by name."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def condition(testbed: Testbed, namespace: str, name: str) -> dict[str, Any]:
    obj = get(testbed, "pod", name, namespace) or {}
    found = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    return dict(found.get(CONDITION) or {})


def gated(testbed: Testbed, namespace: str, name: str) -> bool:
    obj = get(testbed, "pod", name, namespace) or {}
    return GATE in [g["name"] for g in (obj.get("spec") or {}).get("schedulingGates") or []]


def told(testbed: Testbed, namespace: str, name: str, words: str) -> dict[str, Any]:
    return dict(
        wait_for(
            f"pod {name} told {words!r}",
            lambda: (
                (c := condition(testbed, namespace, name)) and words in c.get("message", "") and c
            ),
            timeout=60,
        )
    )


def test_a_high_priority_pod_gets_the_device_a_low_priority_pod_holds(
    testbed: Testbed, operator: OperatorProcess, namespace: str, classes: dict[str, str]
) -> None:
    pool = make_pool(testbed, 1, 1, prefix="preempt")
    [node] = pool.nodes
    testbed.apply(template(namespace, "one", pool))
    testbed.apply(gpu_pod(namespace, "notebook", pool, classes["low"], finalizers=[HOLD]))
    assert wait_bound(testbed, namespace, "notebook") == node
    testbed.apply(gpu_pod(namespace, "inference", pool, classes["high"]))

    # The victim: marked as upstream marks preemption victims, deleted, told by whom.
    def marked() -> dict[str, Any] | None:
        obj = get(testbed, "pod", "notebook", namespace) or {}
        if not obj.get("metadata", {}).get("deletionTimestamp"):
            return None
        found = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        return found.get("DisruptionTarget")

    target = wait_for("the notebook marked and deleted", marked, timeout=60)
    assert target["reason"] == "PreemptionByScheduler", target
    preempted = events(testbed, namespace, "notebook", "Preempted")
    assert preempted and f"{namespace}/inference" in preempted[0]["message"], preempted
    # The preemptor: what it waits for, and the node nominated for it.
    waiting = told(testbed, namespace, "inference", f"{namespace}/notebook")
    assert waiting["reason"] == "Preempting", waiting
    obj = get(testbed, "pod", "inference", namespace) or {}
    assert (obj.get("status") or {}).get("nominatedNodeName") == node
    assert gated(testbed, namespace, "inference")

    # A third pod comes while the victim terminates; the device, once free, is not its.
    testbed.apply(gpu_pod(namespace, "latecomer", pool, classes["low"]))
    testbed.kubectl(
        "patch", "pod", "notebook", f"--namespace={namespace}", "--type=merge",
        "-p", json.dumps({"metadata": {"finalizers": None}}),
    )  # fmt: skip
    assert wait_bound(testbed, namespace, "inference") == node
    # The latecomer is told it waits (after the operator's grace), and still holds nothing.
    latecomer = wait_for(
        "the latecomer told it waits",
        lambda: (c := condition(testbed, namespace, "latecomer")).get("status") == "False" and c,
        timeout=60,
    )
    assert "no free device" in latecomer["message"], latecomer
    assert gated(testbed, namespace, "latecomer")
    devices = allocated_devices(testbed, namespace)
    assert len(devices) == len(set(devices)) == 1, devices


def test_equal_priority_waits_and_says_what_it_would_take(
    testbed: Testbed, operator: OperatorProcess, namespace: str, classes: dict[str, str]
) -> None:
    pool = make_pool(testbed, 1, 1, prefix="preempt-eq")
    testbed.apply(template(namespace, "one", pool))
    testbed.apply(gpu_pod(namespace, "first", pool, classes["high"]))
    wait_bound(testbed, namespace, "first")
    testbed.apply(gpu_pod(namespace, "second", pool, classes["high"]))
    told(testbed, namespace, "second", "it would need to preempt 1 pod(s) of priority 1000")
    assert gated(testbed, namespace, "second")
    first = get(testbed, "pod", "first", namespace) or {}
    assert not first["metadata"].get("deletionTimestamp")


def test_a_pod_that_never_preempts_waits(
    testbed: Testbed, operator: OperatorProcess, namespace: str, classes: dict[str, str]
) -> None:
    pool = make_pool(testbed, 1, 1, prefix="preempt-never")
    testbed.apply(template(namespace, "one", pool))
    testbed.apply(gpu_pod(namespace, "holder", pool, classes["low"]))
    wait_bound(testbed, namespace, "holder")
    testbed.apply(gpu_pod(namespace, "polite", pool, classes["never"]))
    told(testbed, namespace, "polite", "preemptionPolicy is Never")
    holder = get(testbed, "pod", "holder", namespace) or {}
    assert not holder["metadata"].get("deletionTimestamp")


def test_a_victim_a_budget_protects_is_passed_over_while_another_exists(
    testbed: Testbed, operator: OperatorProcess, namespace: str, classes: dict[str, str]
) -> None:
    """Two nodes of one device: the lower-priority holder is covered by a
    PodDisruptionBudget with no disruption left, so the other node's holder goes."""
    pool = make_pool(testbed, 2, 1, prefix="preempt-pdb")
    testbed.apply(template(namespace, "one", pool))
    testbed.apply(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-db", "namespace": namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
        }
    )
    db = gpu_pod(namespace, "db", pool, classes["low"])
    db["metadata"]["labels"] = {"app": "db"}
    db["spec"]["affinity"] = on_node(pool.nodes[0])
    testbed.apply(db)
    batch = gpu_pod(namespace, "batch", pool, classes["mid"])
    batch["spec"]["affinity"] = on_node(pool.nodes[1])
    testbed.apply(batch)
    wait_bound(testbed, namespace, "db")
    wait_bound(testbed, namespace, "batch")
    testbed.apply(gpu_pod(namespace, "urgent", pool, classes["high"]))
    assert wait_bound(testbed, namespace, "urgent") == pool.nodes[1]
    db_now = get(testbed, "pod", "db", namespace) or {}
    assert not db_now["metadata"].get("deletionTimestamp"), "the budget's pod stays"


def test_a_gang_is_preempted_whole(
    testbed: Testbed, operator: OperatorProcess, namespace: str, classes: dict[str, str]
) -> None:
    """A node of two devices, held by a gang of two: a pod that needs one device takes the
    whole gang with it (a gang member never runs without its gang)."""
    pool = make_pool(testbed, 1, 2, prefix="preempt-gang")
    testbed.apply(template(namespace, "one", pool))
    gang = {f"{GROUP}/gang": "train", f"{GROUP}/gang-size": "2"}
    for name in ("w0", "w1"):
        member = gpu_pod(namespace, name, pool, classes["low"])
        member["metadata"]["annotations"].update(gang)
        testbed.apply(member)
    wait_bound(testbed, namespace, "w0")
    wait_bound(testbed, namespace, "w1")
    testbed.apply(gpu_pod(namespace, "urgent", pool, classes["high"]))
    wait_bound(testbed, namespace, "urgent")
    for name in ("w0", "w1"):
        left = get(testbed, "pod", name, namespace)
        assert left is None or left["metadata"].get("deletionTimestamp"), name
