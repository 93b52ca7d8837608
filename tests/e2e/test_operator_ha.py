"""Crash safety and leader election, with the operator as real processes.

Pods here carry the scheduling gate themselves (the protocol allows the user to add it), so
that the tests do not depend on which replica's webhook the API server calls.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .kube_helpers import Testbed, unique_name, wait_for
from .operator_fixtures import (
    GATE,
    LEASE_NAMESPACE,
    OperatorProcess,
    Pool,
    claims_in,
    get,
    install_crds,
    make_pool,
    pod,
    template,
)
from .operator_fixtures import claim as claim_body

pytestmark = pytest.mark.api_modes

READY_LABEL = "e2e.dralloc.dev/ready"


def gated_pod(namespace: str, name: str, pool: Pool) -> dict[str, Any]:
    body = pod(namespace, name, pool, [{"name": "dev", "resourceClaimTemplateName": "one"}])
    body["spec"]["schedulingGates"] = [{"name": GATE}]
    return body


def bound(testbed: Testbed, namespace: str, names: list[str]) -> list[str]:
    return [
        n
        for n in names
        if ((get(testbed, "pod", n, namespace) or {}).get("spec") or {}).get("nodeName")
    ]


def assert_consistent(testbed: Testbed, namespace: str, pods: list[str]) -> None:
    """Every pod has exactly one allocated claim reserved for it; no device twice."""
    devices = []
    owners = []
    for claim in claims_in(testbed, namespace):
        status = claim.get("status") or {}
        allocation = status.get("allocation")
        if allocation is None:
            continue
        devices += [(r["driver"], r["pool"], r["device"]) for r in allocation["devices"]["results"]]
        owners += [entry["name"] for entry in status.get("reservedFor") or []]
    assert len(devices) == len(set(devices)), f"a device was handed out twice: {devices}"
    assert sorted(owners) == sorted(pods)


@pytest.fixture
def operators(testbed: Testbed, tmp_path: Path) -> Iterator[list[OperatorProcess]]:
    install_crds(testbed)
    started: list[OperatorProcess] = []
    yield started
    for proc in started:
        proc.stop(signal.SIGKILL)


def new_replica(
    testbed: Testbed, tmp_path: Path, lease: str, identity: str, started: list[OperatorProcess]
) -> OperatorProcess:
    proc = OperatorProcess(
        testbed, tmp_path / f"{identity}.log", lease, webhook=False, identity=identity
    ).start()
    started.append(proc)
    return proc


def test_killed_mid_allocation_restart_finishes_without_double_allocation(
    testbed: Testbed, namespace: str, operators: list[OperatorProcess], tmp_path: Path
) -> None:
    pool = make_pool(testbed, nodes=5, devices=2)
    testbed.apply(template(namespace, "one", pool))
    lease = unique_name("dralloc-kill")
    first = new_replica(testbed, tmp_path, lease, "first", operators)
    first.wait_ready()
    names = [f"p{i}" for i in range(10)]
    # Half the pods need a node label that comes only after the kill, so that the first
    # replica surely dies with work left (it allocates the others within milliseconds).
    bodies = [gated_pod(namespace, n, pool) for n in names]
    for body in bodies[5:]:
        body["spec"]["nodeSelector"] = {**body["spec"]["nodeSelector"], READY_LABEL: "yes"}
    testbed.apply(*bodies)
    first.wait_until("pod allocated", timeout=60)
    first.stop(signal.SIGKILL)
    # The held half cannot be bound before the label: the kill always leaves work.
    assert set(bound(testbed, namespace, names)) <= set(names[:5]), "a held pod was bound"
    for node in pool.nodes:
        testbed.kubectl("label", "node", node, f"{READY_LABEL}=yes")

    second = new_replica(testbed, tmp_path, lease, "second", operators)
    second.wait_ready()
    wait_for("all pods bound", lambda: bound(testbed, namespace, names) == names, timeout=90)
    assert_consistent(testbed, namespace, names)


def test_pods_waiting_when_it_starts_are_allocated_and_written_back_whole(
    testbed: Testbed, namespace: str, operators: list[OperatorProcess], tmp_path: Path
) -> None:
    """An operator starting reads the pods by a list, decoded into only the fields its
    parsers read; the pods it writes back whole (those under its gate) must come from the
    list whole, or the update drops what the parsers skip (or is refused). Half the pods
    name claims made beforehand, so that the allocation's write is the first (in CRD mode
    the claim controller's first write to a pod of a template is a patch)."""
    pool = make_pool(testbed, nodes=2, devices=2)
    testbed.apply(template(namespace, "one", pool))
    names = [f"w{i}" for i in range(4)]
    bodies = [gated_pod(namespace, n, pool) for n in names[:2]]
    for name in names[2:]:
        testbed.apply(claim_body(namespace, f"{name}-claim", pool))
        body = pod(namespace, name, pool, [{"name": "dev", "resourceClaimName": f"{name}-claim"}])
        body["spec"]["schedulingGates"] = [{"name": GATE}]
        bodies.append(body)
    for body in bodies:
        body["metadata"].setdefault("annotations", {})["e2e.dralloc.dev/unread"] = "kept"
        body["spec"]["containers"][0]["env"] = [{"name": "UNREAD", "value": "kept"}]
    testbed.apply(*bodies)  # no operator runs yet: they wait behind its gate
    before = {n: get(testbed, "pod", n, namespace) for n in names}
    replica = new_replica(testbed, tmp_path, unique_name("dralloc-list"), "lister", operators)
    replica.wait_ready()
    wait_for("all pods bound", lambda: bound(testbed, namespace, names) == names, timeout=90)
    assert_consistent(testbed, namespace, names)
    for name in names:
        now, was = get(testbed, "pod", name, namespace), before[name]
        assert now is not None and was is not None
        assert now["metadata"]["annotations"]["e2e.dralloc.dev/unread"] == "kept"
        container = now["spec"]["containers"][0]
        assert container["env"] == [{"name": "UNREAD", "value": "kept"}]
        assert container["image"] == was["spec"]["containers"][0]["image"]
        assert now["status"].get("qosClass") == was["status"].get("qosClass") is not None
    refused = [line for line in replica.log().splitlines() if "request refused" in line]
    assert not refused, refused[:3]


def test_only_the_leader_acts_and_the_standby_takes_over(
    testbed: Testbed, namespace: str, operators: list[OperatorProcess], tmp_path: Path
) -> None:
    pool = make_pool(testbed, nodes=2, devices=2)
    testbed.apply(template(namespace, "one", pool))
    lease = unique_name("dralloc-ha")
    a = new_replica(testbed, tmp_path, lease, "replica-a", operators)
    a.wait_ready()
    b = new_replica(testbed, tmp_path, lease, "replica-b", operators)
    b.wait_until("waiting for leadership")
    b.wait_until("cache synced")

    testbed.apply(gated_pod(namespace, "before", pool))
    wait_for("the first pod bound", lambda: bound(testbed, namespace, ["before"]))
    assert "pod allocated" in a.log()
    assert "controllers starting" not in b.log() and "pod allocated" not in b.log()

    mark = len(b.log())
    a.stop(signal.SIGKILL)
    b.wait_until("became leader", timeout=30, after=mark)
    testbed.apply(gated_pod(namespace, "after", pool))
    wait_for("the second pod bound", lambda: bound(testbed, namespace, ["after"]), timeout=60)
    assert "pod allocated" in b.log()[mark:]
    assert_consistent(testbed, namespace, ["before", "after"])


def test_a_clean_stop_hands_the_lease_to_the_standby_at_once(
    testbed: Testbed, namespace: str, operators: list[OperatorProcess], tmp_path: Path
) -> None:
    """With a 40 s lease, a standby that waited the Lease out would take 40 s: a leader
    stopped with SIGTERM hands it back, and the standby leads at its next try."""
    pool = make_pool(testbed, nodes=1, devices=2)
    testbed.apply(template(namespace, "one", pool))
    lease = unique_name("dralloc-handoff")
    long_lease = ["--lease-duration=40", "--renew-deadline=30"]

    def replica(identity: str) -> OperatorProcess:
        proc = OperatorProcess(
            testbed, tmp_path / f"{identity}.log", lease, webhook=False, identity=identity,
            extra=long_lease,
        ).start()  # fmt: skip
        operators.append(proc)
        return proc

    a = replica("replica-a")
    a.wait_ready()
    b = replica("replica-b")
    b.wait_until("waiting for leadership")
    b.wait_until("cache synced")
    holder = (get(testbed, "lease", lease, LEASE_NAMESPACE) or {}).get("spec") or {}
    assert holder.get("holderIdentity") == "replica-a"
    assert holder.get("leaseDurationSeconds") == 40

    mark = len(b.log())
    stopped = time.monotonic()
    a.stop(signal.SIGTERM)
    assert a.process is not None and a.process.returncode is not None
    assert "released leadership" in a.log()
    b.wait_until("became leader", timeout=15, after=mark)
    took = time.monotonic() - stopped
    assert took < 15, f"the standby waited {took:.0f}s for the Lease"
    b.wait_until("controllers starting", timeout=15, after=mark)
    testbed.apply(gated_pod(namespace, "after", pool))
    wait_for("the pod bound by the new leader", lambda: bound(testbed, namespace, ["after"]))
    assert "pod allocated" in b.log()[mark:]


def hold_pod_writes(namespace: str, name: str) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (and its binding) that refuses, in this namespace, any pod
    update that takes our scheduling gate away: the operator's claim write goes through, its
    pod write is refused, so the operator stays between the two."""
    keeps_gate = f"object.spec.?schedulingGates.orValue([]).exists(g, g.name == '{GATE}')"
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "validations": [
                    {"expression": keeps_gate, "message": "e2e: the pod write is held"}
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        },
    ]


def probe_pod(namespace: str) -> dict[str, Any]:
    """A pod with our gate and no claims, to see the policy take effect."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {
            "schedulingGates": [{"name": GATE}],
            "containers": [{"name": "c", "image": "registry.invalid/probe"}],
        },
    }


def gate_removal_refused(testbed: Testbed, namespace: str, name: str) -> bool:
    removed = testbed.kubectl(
        "patch", "pod", name, "-n", namespace, "--type=merge", "--dry-run=server",
        "-p", '{"spec": {"schedulingGates": null}}', check=False,
    )  # fmt: skip
    return removed.returncode != 0 and "the pod write is held" in removed.stderr


def test_killed_between_the_claim_write_and_the_pod_write_the_next_replica_resumes(
    testbed: Testbed, namespace: str, operators: list[OperatorProcess], tmp_path: Path
) -> None:
    """The state of a crash between the two writes, made on purpose rather than by a lucky
    kill: the API server refuses the pod write, the operator is killed with the claim
    allocated and reserved and the pod gated, the refusal is lifted, the next replica must
    finish with the same allocation."""
    pool = make_pool(testbed, nodes=2, devices=2)
    testbed.apply(template(namespace, "one", pool))
    policy = unique_name("hold-pod-writes")
    testbed.apply(*hold_pod_writes(namespace, policy))
    try:
        testbed.apply(probe_pod(namespace))
        wait_for(
            "the policy to refuse the gate's removal",
            lambda: gate_removal_refused(testbed, namespace, "probe"),
            timeout=30,
        )
        testbed.kubectl("delete", "pod", "probe", "-n", namespace, "--wait=false")

        lease = unique_name("dralloc-held")
        first = new_replica(testbed, tmp_path, lease, "first", operators)
        first.wait_ready()
        testbed.apply(gated_pod(namespace, "p", pool))

        def allocated_and_reserved() -> dict[str, Any] | None:
            for claim in claims_in(testbed, namespace):
                status = claim.get("status") or {}
                reserved = [r["name"] for r in status.get("reservedFor") or []]
                if status.get("allocation") and reserved == ["p"]:
                    return dict(claim)
            return None

        held = wait_for("the claim allocated and reserved", allocated_and_reserved, timeout=60)
        first.wait_until("the pod write is held", timeout=30)  # the pod write was refused
        first.stop(signal.SIGKILL)
        gated = get(testbed, "pod", "p", namespace)
        assert gated is not None
        assert [g["name"] for g in gated["spec"].get("schedulingGates") or []] == [GATE]
        assert not gated["spec"].get("nodeName")
    finally:
        for kind in ("validatingadmissionpolicybinding", "validatingadmissionpolicy"):
            testbed.kubectl("delete", kind, policy, "--ignore-not-found", check=False)

    second = new_replica(testbed, tmp_path, lease, "second", operators)
    second.wait_ready()
    wait_for("the pod bound", lambda: bound(testbed, namespace, ["p"]) == ["p"], timeout=90)
    assert_consistent(testbed, namespace, ["p"])
    [claim] = [
        c for c in claims_in(testbed, namespace) if c["metadata"]["uid"] == held["metadata"]["uid"]
    ]
    assert claim["status"]["allocation"] == held["status"]["allocation"], "allocated again"
    pinned = get(testbed, "pod", "p", namespace)
    assert pinned is not None
    results = claim["status"]["allocation"]["devices"]["results"]
    assert pinned["spec"]["nodeName"] == results[0]["pool"]
