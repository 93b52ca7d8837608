"""Placement that kube-scheduler agrees with.

dralloc allocates a pod's claims on one node and lifts its scheduling gate; kube-scheduler
then binds it there, or refuses to. What keeps the scheduler on that node: a required node
affinity dralloc pins the pod with (in-tree, the claims' ``allocation.nodeSelector`` names the
node too). The choice is only good if the scheduler's own filters pass on that node: resources (cpu, memory, pods), host ports,
inter-pod (anti-)affinity in both directions, and topology spread. These tests give each
filter a case where the device-only choice (binpack: the node with the fewest matching free
devices left) breaks it, and check that dralloc chooses a node that keeps it, or none at all
(then the pod stays gated and is told why). The last two check recovery when the scheduler
refuses anyway, because the node filled up between dralloc's choice and the scheduler's turn.

Every test makes its own nodes of a realistic size (cpu 8 / memory 32Gi / pods 110 unless
said otherwise), labelled for it alone, with its own driver and ResourceSlices.

A pod that dralloc released to a node where kube-scheduler says ``Unschedulable`` fails its
test at once, with the scheduler's message: that refusal is exactly what is under test, and
the pod would otherwise wait forever.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .kube_helpers import Testbed, wait_for
from .operator_fixtures import (
    DEVICES_ANNOTATION,
    GATE,
    GROUP,
    NodeShape,
    OperatorProcess,
    Pool,
    claims_in,
    events,
    get,
    make_sized_pool,
    pod,
    running_operator,
    template,
)
from .reliability_helpers import pod_condition, scheduler_healthy, stopped

pytestmark = [pytest.mark.timeout(150), pytest.mark.api_modes]

RELEASE_GRACE_S = 3  # DRALLOC_RELEASE_GRACE of this module's operator
CONDITION = f"{GROUP}/DevicesAllocated"
HOSTNAME = "kubernetes.io/hostname"
GPU = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
BIND_TIMEOUT_S = 30.0  # binding takes about a second; the rest is margin for a busy machine


@pytest.fixture(scope="module")
def operator(
    testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    # A short grace before a pod the scheduler refuses is given up on, so recovery is quick;
    # the cases below are built on binpack, so an exported DRALLOC_NODE_POLICY must not win.
    env = {"DRALLOC_RELEASE_GRACE": str(RELEASE_GRACE_S), "DRALLOC_NODE_POLICY": "binpack"}
    yield from running_operator(testbed, tmp_path_factory, env=env)


# -- helpers -----------------------------------------------------------------------------------


def small_node(role: str, devices: int) -> NodeShape:
    return NodeShape(role, devices, cpu="2", memory="8Gi", pods=110)


def big_node(role: str, devices: int) -> NodeShape:
    return NodeShape(role, devices, cpu="8", memory="32Gi", pods=110)


def gpu_pod(
    namespace: str, name: str, pool: Pool, *, cpu: str | None = None, **fields: Any
) -> dict[str, Any]:
    """A pod with one GPU from the template ``gpu`` and, if given, a cpu request."""
    resources = {"requests": {"cpu": cpu}} if cpu is not None else None
    return pod(namespace, name, pool, GPU, resources=resources, **fields)


def on_node(pool: Pool, node: str) -> dict[str, str]:
    """A nodeSelector for one node of the pool (used to seat a test's first pod)."""
    return {**pool.node_selector, HOSTNAME: node}


def anti_affinity(**match_labels: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": match_labels}, "topologyKey": HOSTNAME}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def pinned_node(obj: dict[str, Any] | None) -> str | None:
    """The node dralloc pinned the pod to (its metadata.name node-affinity requirement)."""
    affinity = ((obj or {}).get("spec") or {}).get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In":
                return str(field["values"][0])
    return None


def allocation_node(claim: dict[str, Any]) -> str | None:
    """The node a claim's ``allocation.nodeSelector`` names (``matchFields metadata.name``)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In":
                return str(field["values"][0])
    return None


def assert_kept_to(testbed: Testbed, obj: dict[str, Any], node: str) -> None:
    """The released pod ``obj`` can go nowhere but ``node``: dralloc pinned it there (both
    modes); in-tree its claim's allocation names the node too."""
    assert testbed.api_mode.pins_node
    assert pinned_node(obj) == node, describe(obj)
    if testbed.api_mode.name == "in-tree":
        [generated] = claims_of(testbed, obj["metadata"]["namespace"], obj["metadata"]["uid"])
        assert allocation_node(generated) == node, generated.get("status")


def gated(obj: dict[str, Any]) -> bool:
    return GATE in [g.get("name") for g in obj["spec"].get("schedulingGates") or []]


def describe(obj: dict[str, Any] | None) -> str:
    """The pod's placement state in one line, for failure messages."""
    if obj is None:
        return "pod is gone"
    parts = [
        f"gated={gated(obj)}",
        f"pinned={pinned_node(obj)}",
        f"nodeName={obj['spec'].get('nodeName')}",
    ]
    for type_ in ("PodScheduled", CONDITION):
        found = pod_condition(obj, type_)
        if found:
            parts.append(
                f"{type_}={found.get('status')}/{found.get('reason')}: {found.get('message')!r}"
            )
    return ", ".join(parts)


def wait_placed(testbed: Testbed, namespace: str, name: str) -> str:
    """The node the pod is bound to; fails at once if kube-scheduler refuses dralloc's choice."""
    deadline = time.monotonic() + BIND_TIMEOUT_S
    obj: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        obj = get(testbed, "pod", name, namespace)
        assert obj is not None, f"pod {namespace}/{name} disappeared"
        node = obj["spec"].get("nodeName")
        if node:
            return str(node)
        scheduled = pod_condition(obj, "PodScheduled") or {}
        if not gated(obj) and scheduled.get("reason") == "Unschedulable":
            raise AssertionError(
                f"dralloc released pod {name} ({describe(obj)}), and kube-scheduler refuses it: "
                f"{scheduled.get('message')}"
            )
        time.sleep(0.25)
    raise AssertionError(f"pod {name} not bound after {BIND_TIMEOUT_S:.0f} s: {describe(obj)}")


def claims_of(testbed: Testbed, namespace: str, uid: str) -> list[dict[str, Any]]:
    """The claims generated for the pod with this UID (owned by it)."""
    return [
        c
        for c in claims_in(testbed, namespace)
        if uid in [o.get("uid") for o in c["metadata"].get("ownerReferences") or []]
    ]


def reserved_for(claim: dict[str, Any], uid: str) -> bool:
    return uid in [r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or []]


def allocated_pool(claim: dict[str, Any]) -> str | None:
    """The pool (= node, in these tests) of the claim's first allocated device."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return str(results[0]["pool"]) if results else None


def assert_devices_on(testbed: Testbed, namespace: str, name: str, node: str) -> None:
    """The pod's claim is allocated on ``node``, reserved for it, and the pod says so."""
    obj = get(testbed, "pod", name, namespace)
    assert obj is not None
    uid = obj["metadata"]["uid"]
    [generated] = claims_of(testbed, namespace, uid)
    assert allocated_pool(generated) == node, generated.get("status")
    assert reserved_for(generated, uid), generated.get("status")
    devices = json.loads(obj["metadata"]["annotations"][DEVICES_ANNOTATION])
    assert devices[0]["devices"][0]["pool"] == node, devices


# -- resources ---------------------------------------------------------------------------------


def test_cpu_request_picks_the_node_with_room(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    # binpack alone prefers `small`: taking its only GPU leaves 0 free, `big` would keep 7.
    pool = make_sized_pool(testbed, [small_node("small", 1), big_node("big", 8)])
    small, big = pool.node("small"), pool.node("big")
    testbed.apply(template(namespace, "gpu", pool))

    testbed.apply(gpu_pod(namespace, "a", pool, cpu="4"))
    assert wait_placed(testbed, namespace, "a") == big
    wait_for(
        "pod a Running",
        lambda: (
            ((get(testbed, "pod", "a", namespace) or {}).get("status") or {}).get("phase")
            == "Running"
        ),
        timeout=BIND_TIMEOUT_S,
    )
    assert_devices_on(testbed, namespace, "a", big)

    # 1 cpu fits either node (small has 2, big 4 left): any choice the scheduler takes will do.
    testbed.apply(gpu_pod(namespace, "b", pool, cpu="1"))
    node_b = wait_placed(testbed, namespace, "b")
    assert node_b in (small, big)
    assert_devices_on(testbed, namespace, "b", node_b)


def test_pod_no_node_has_cpu_for_stays_gated_and_explained(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = make_sized_pool(testbed, [small_node("small", 1), big_node("big", 8)])
    testbed.apply(template(namespace, "gpu", pool))
    testbed.apply(gpu_pod(namespace, "huge", pool, cpu="64"))

    created = get(testbed, "pod", "huge", namespace)
    assert created is not None
    uid = created["metadata"]["uid"]
    # The claim is there (so "not allocated" below means something) ...
    wait_for("the pod's claim", lambda: claims_of(testbed, namespace, uid), timeout=30)
    # ... and for 5 s the pod must keep its gate: no node has 64 cpus.
    watch_until = time.monotonic() + 5.0
    while time.monotonic() < watch_until:
        obj = get(testbed, "pod", "huge", namespace)
        assert obj is not None
        assert gated(obj), f"dralloc released a pod no node has the cpu for: {describe(obj)}"
        time.sleep(0.25)
    for generated in claims_of(testbed, namespace, uid):
        assert not (generated.get("status") or {}).get("allocation"), generated["status"]

    def explained() -> str | None:
        for event in events(testbed, namespace, "huge", "FailedAllocation"):
            if "Insufficient cpu" in event.get("message", ""):
                assert event["type"] == "Warning", event
                return str(event["message"])
        found = pod_condition(get(testbed, "pod", "huge", namespace), CONDITION) or {}
        if found.get("status") == "False" and "Insufficient cpu" in found.get("message", ""):
            return str(found["message"])
        return None

    try:
        wait_for("an explanation naming 'Insufficient cpu'", explained, timeout=20)
    except AssertionError as exc:
        reasons = [e.get("message") for e in events(testbed, namespace, "huge", "FailedAllocation")]
        pod_now = describe(get(testbed, "pod", "huge", namespace))
        raise AssertionError(f"{exc}; FailedAllocation events: {reasons}; {pod_now}") from None


# -- inter-pod anti-affinity, host ports --------------------------------------------------------


def two_nodes(testbed: Testbed) -> Pool:
    """`few` (2 GPUs) and `many` (4 GPUs): once a pod holds a GPU on `few`, binpack prefers
    `few` for the next one (1 free left: 0 after it, against 3 on `many`)."""
    return make_sized_pool(testbed, [big_node("few", 2), big_node("many", 4)])


def assert_binpack_still_prefers(testbed: Testbed, namespace: str, pool: Pool, node: str) -> None:
    """Control: a pod without the constraint under test goes to ``node``, so it was the
    constraint, not the device counts, that moved the constrained pod away from it."""
    testbed.apply(gpu_pod(namespace, "control", pool, labels={"app": "control"}))
    assert wait_placed(testbed, namespace, "control") == node, (
        "the unconstrained control pod went elsewhere: the test's premise (binpack prefers "
        f"{node}) does not hold"
    )


def test_required_anti_affinity_of_the_new_pod(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = two_nodes(testbed)
    few, many = pool.node("few"), pool.node("many")
    testbed.apply(template(namespace, "gpu", pool))
    testbed.apply(
        gpu_pod(namespace, "p1", pool, labels={"app": "web"}, nodeSelector=on_node(pool, few))
    )
    assert wait_placed(testbed, namespace, "p1") == few

    testbed.apply(
        gpu_pod(namespace, "p2", pool, labels={"app": "web"}, affinity=anti_affinity(app="web"))
    )
    assert wait_placed(testbed, namespace, "p2") == many
    assert_devices_on(testbed, namespace, "p2", many)
    assert_binpack_still_prefers(testbed, namespace, pool, few)


def test_required_anti_affinity_of_an_existing_pod(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = two_nodes(testbed)
    few, many = pool.node("few"), pool.node("many")
    testbed.apply(template(namespace, "gpu", pool))
    testbed.apply(
        gpu_pod(
            namespace, "p1", pool, labels={"app": "web"}, affinity=anti_affinity(app="db"),
            nodeSelector=on_node(pool, few),
        )
    )  # fmt: skip
    assert wait_placed(testbed, namespace, "p1") == few

    # p3 has no constraint of its own: only p1's anti-affinity keeps it off `few`.
    testbed.apply(gpu_pod(namespace, "p3", pool, labels={"app": "db"}))
    assert wait_placed(testbed, namespace, "p3") == many
    assert_devices_on(testbed, namespace, "p3", many)
    assert_binpack_still_prefers(testbed, namespace, pool, few)


def test_host_port_taken_on_a_node(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = two_nodes(testbed)
    few, many = pool.node("few"), pool.node("many")
    testbed.apply(template(namespace, "gpu", pool))
    port = [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}]
    testbed.apply(gpu_pod(namespace, "first", pool, ports=port, nodeSelector=on_node(pool, few)))
    assert wait_placed(testbed, namespace, "first") == few

    testbed.apply(gpu_pod(namespace, "second", pool, ports=port))
    assert wait_placed(testbed, namespace, "second") == many
    assert_devices_on(testbed, namespace, "second", many)
    assert_binpack_still_prefers(testbed, namespace, pool, few)


# -- topology spread ---------------------------------------------------------------------------


def test_topology_spread_over_hostnames(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    # Equal nodes: binpack would stack all three pods on the first node by name.
    pool = make_sized_pool(testbed, [big_node(role, 3) for role in "abc"])
    testbed.apply(template(namespace, "gpu", pool))
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": HOSTNAME,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}},
        }
    ]
    # One after the other, as kube-scheduler would see them: each is placed knowing the rest.
    # (In crd mode kube-scheduler cannot catch a wrong pin here: the default nodeAffinityPolicy
    # Honor counts only nodes the pinned pod may go to, i.e. the pinned node alone, so any pin
    # has skew 0. dralloc has to spread the pods itself, over the nodes of their nodeSelector.)
    placed = {}
    for name in ("s1", "s2", "s3"):
        testbed.apply(
            gpu_pod(
                namespace, name, pool, labels={"app": "spread"}, topologySpreadConstraints=spread
            )
        )
        placed[name] = wait_placed(testbed, namespace, name)
    assert sorted(placed.values()) == sorted(pool.nodes), placed
    for name, node in placed.items():
        assert_devices_on(testbed, namespace, name, node)


# -- recovery: the scheduler refuses a pod after dralloc released it -------------------------------


def release_then_fill(
    testbed: Testbed, namespace: str, name: str, **fields: Any
) -> tuple[str, str]:
    """Make kube-scheduler refuse a pod dralloc has already released; returns (uid, node).

    With the scheduler stopped: create the pod (cpu 2, on the pool's only node, which has
    cpu 2), wait until dralloc has allocated it and lifted its gate, then take the node's cpu
    with a pod bound by nodeName (no scheduler involved). Started again, the scheduler syncs
    its cache before it schedules anything, so it sees the node full: "Insufficient cpu".

    (Freezing the scheduler with SIGSTOP instead is not deterministic: thawed, it mostly
    binds the pod before its cache has taken in the filler pod.)
    """
    pool = make_sized_pool(testbed, [small_node("only", 1)])
    node = pool.node("only")
    testbed.apply(template(namespace, "gpu", pool))
    with stopped(testbed, "kube-scheduler"):
        testbed.apply(gpu_pod(namespace, name, pool, cpu="2", **fields))

        def released() -> dict[str, Any] | None:
            obj = get(testbed, "pod", name, namespace)
            return obj if obj is not None and not gated(obj) else None

        obj = wait_for(f"dralloc to release pod {name}", released, timeout=30, interval=0.1)
        assert_kept_to(testbed, obj, node)
        testbed.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-filler", "namespace": namespace},
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.invalid/fake",
                            "resources": {"requests": {"cpu": "2"}},
                        }
                    ],
                },
            }
        )
    wait_for("kube-scheduler healthy again", lambda: scheduler_healthy(testbed), timeout=60)
    uid = str(obj["metadata"]["uid"])
    [generated] = claims_of(testbed, namespace, uid)
    assert allocated_pool(generated) == node and reserved_for(generated, uid), generated
    return uid, node


def refusal_event(testbed: Testbed, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
    found = [
        e
        for e in events(testbed, namespace, name, "SchedulerRefused")
        if (e.get("involvedObject") or {}).get("uid") == uid
    ]
    return found[0] if found else None


def wait_refusal_event(testbed: Testbed, namespace: str, name: str, uid: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        event = refusal_event(testbed, namespace, name, uid)
        if event is not None:
            return event
        obj = get(testbed, "pod", name, namespace)
        if obj is not None and obj["metadata"]["uid"] == uid and obj["spec"].get("nodeName"):
            raise AssertionError(
                f"test setup broken: kube-scheduler bound the pod to its full node: {describe(obj)}"
            )
        time.sleep(0.25)
    obj = get(testbed, "pod", name, namespace)
    raise AssertionError(f"no SchedulerRefused event on pod {name} after 30 s: {describe(obj)}")


def test_a_bare_pod_the_scheduler_refuses_after_release_is_told_and_keeps_its_devices(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    uid, _ = release_then_fill(testbed, namespace, "refused")

    event = wait_refusal_event(testbed, namespace, "refused", uid)
    assert event["type"] == "Warning", event
    assert "Insufficient cpu" in event["message"], event  # the scheduler's own words

    obj = get(testbed, "pod", "refused", namespace)
    assert obj is not None and obj["metadata"]["uid"] == uid, "a pod without owner is kept"
    assert not obj["spec"].get("nodeName"), describe(obj)
    condition = wait_for(
        "the DevicesAllocated condition to say SchedulerRefused",
        lambda: (
            found
            if (found := pod_condition(get(testbed, "pod", "refused", namespace), CONDITION))
            and found.get("reason") == "SchedulerRefused"
            else None
        ),
        timeout=15,
    )
    # It keeps its devices: kube-scheduler may yet bind it on the allocation it sees.
    assert condition["status"] == "True", condition
    assert "the pod keeps its devices" in condition["message"], condition
    mine = claims_of(testbed, namespace, uid)
    assert mine and all(
        (c.get("status") or {}).get("allocation") and reserved_for(c, uid) for c in mine
    ), mine


def test_refused_pod_with_a_controller_is_deleted_for_recreation(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    # A real owner (the testbed runs no ReplicaSet controller, so nothing acts on it) keeps
    # the garbage collector off the pod and tells dralloc that someone will recreate it.
    labels = {"app": "owned"}
    testbed.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "owner", "namespace": namespace},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "registry.invalid/fake"}]},
                },
            },
        }
    )
    owner = get(testbed, "replicaset", "owner", namespace)
    assert owner is not None
    reference = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    uid, _ = release_then_fill(
        testbed, namespace, "owned", labels=labels, owner_references=[reference]
    )

    def gone() -> bool:
        obj = get(testbed, "pod", "owned", namespace)
        return (
            obj is None
            or obj["metadata"]["uid"] != uid
            or bool(obj["metadata"].get("deletionTimestamp"))
        )

    try:
        wait_for("dralloc to delete the refused pod", gone, timeout=30)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}: {describe(get(testbed, 'pod', 'owned', namespace))}"
        ) from None
    event = refusal_event(testbed, namespace, "owned", uid)
    assert event is not None, "the deleted pod's SchedulerRefused event says why it went"
    assert "Insufficient cpu" in event["message"], event
    wait_for(
        "no claim reserved for the deleted pod",
        lambda: not any(reserved_for(c, uid) for c in claims_in(testbed, namespace)),
        timeout=30,
    )
