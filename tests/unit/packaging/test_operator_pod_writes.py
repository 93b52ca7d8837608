"""The operator-pod-writes ValidatingAdmissionPolicy of manifests/base, evaluated offline.

The operator's identity may change on pods only its protocol: resource.dralloc.dev/
annotations, its own scheduling gate, the node pin while the pod is at that gate, its
conditions and the claim statuses. Everything else it might try with a stolen token (an
image, a label, another gate, the phase, the Ready condition) is refused, naming the field.
tests/e2e/test_security.py runs it on a real API server with the operator's token.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from operators.api.annotations import DEVICES_ANNOTATION, SCHEDULING_GATE
from operators.cache.core import DEVICES_ALLOCATED_CONDITION
from operators.fencing import ALLOCATED_BY_ANNOTATION

from .admission import admit, operator_identity, policy_and_binding
from .test_claim_allocation_fencing import identities
from .test_claim_allocation_policy import OPERATOR_SA

KUBELET = "system:node:n1"


@pytest.fixture
def policy() -> dict[str, Any]:
    return policy_and_binding("operator-pod-writes.yaml")[0]


def gated_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p", "namespace": "team-a", "uid": "u1",
            "labels": {"app": "train"}, "annotations": {"team": "a"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r1", "controller": True}],
        },
        "spec": {
            "containers": [{"name": "c", "image": "registry.example.com/train:1"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "schedulingGates": [{"name": "example.com/quota"}, {"name": SCHEDULING_GATE}],
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
            "qosClass": "BestEffort",
        },
    }  # fmt: skip


def bound_pod() -> dict[str, Any]:
    pod = gated_pod()
    pod["spec"]["schedulingGates"] = []
    pod["spec"]["nodeName"] = "n1"
    pod["metadata"]["annotations"][DEVICES_ANNOTATION] = "[]"
    pod["status"] = {
        "phase": "Running", "podIP": "10.0.0.7", "hostIP": "192.168.0.1",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "c", "ready": True, "image": "registry.example.com/train:1"}],
    }  # fmt: skip
    return pod


def write(
    policy: dict[str, Any],
    old: dict[str, Any],
    new: dict[str, Any],
    status: bool = False,
    user: str = OPERATOR_SA,
) -> str | None:
    return admit(
        policy, {}, operation="UPDATE", obj=new, old=old, user=user,
        sub_resource="status" if status else "",
    )  # fmt: skip


def test_the_operators_own_writes_pass(policy: dict[str, Any]) -> None:
    """Each write the controllers make today (allocation.writes, claims, released, podcondition,
    taints and doubles)."""
    old = gated_pod()
    allocated = copy.deepcopy(old)
    allocated["metadata"]["annotations"][DEVICES_ANNOTATION] = '[{"name": "gpu"}]'
    allocated["metadata"]["annotations"][ALLOCATED_BY_ANNOTATION] = "{}"
    allocated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    allocated["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}  # fmt: skip
    assert write(policy, old, allocated) is None
    # an annotation of its own rewritten or removed on a bound pod
    bound = bound_pod()
    released = copy.deepcopy(bound)
    del released["metadata"]["annotations"][DEVICES_ANNOTATION]
    assert write(policy, bound, released) is None
    # its conditions and the claim statuses, through pods/status
    told = copy.deepcopy(bound)
    told["status"]["conditions"] = [
        *bound["status"]["conditions"],
        {"type": DEVICES_ALLOCATED_CONDITION, "status": "True", "reason": "Allocated"},
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByDralloc"},
    ]
    told["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]
    assert write(policy, bound, told, status=True) is None
    # a preemptor's nominated node (an unbound pod that asks for devices), and a victim's
    # DisruptionTarget with preemption's reason
    waiting = gated_pod()
    nominated = copy.deepcopy(waiting)
    nominated["status"]["nominatedNodeName"] = "n1"
    assert write(policy, waiting, nominated, status=True) is None
    victim = copy.deepcopy(bound)
    victim["status"]["conditions"] = [
        *bound["status"]["conditions"],
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
    ]
    assert write(policy, bound, victim, status=True) is None
    # in-tree, the claim statuses of a gated pod before its gate goes
    gated = gated_pod()
    recorded = copy.deepcopy(gated)
    recorded["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]
    assert write(policy, gated, recorded, status=True) is None


@pytest.mark.parametrize(
    ("change", "status", "named"),
    [
        (lambda p: p["spec"]["containers"][0].update(image="attacker.example/backdoor:1"), False, "spec.containers"),
        (lambda p: p["metadata"]["annotations"].update(team="b"), False, "metadata.annotations"),
        (lambda p: p["metadata"]["annotations"].pop("team"), False, "metadata.annotations"),
        (lambda p: p["metadata"]["labels"].update(app="other"), False, "metadata.labels"),
        (lambda p: p["metadata"].update(ownerReferences=[]), False, "metadata.ownerReferences"),
        (lambda p: p["metadata"].update(finalizers=["x/y"]), False, "metadata.finalizers"),
        (lambda p: p["spec"]["tolerations"].append({"operator": "Exists"}), False, "spec.tolerations"),
        (lambda p: p["spec"].update(activeDeadlineSeconds=1), False, "spec.activeDeadlineSeconds"),
        (lambda p: p["spec"].update(affinity={"nodeAffinity": {}}), False, "spec.affinity"),
        (lambda p: p["status"].update(phase="Failed"), True, "status.phase"),
        (lambda p: p["status"]["conditions"][0].update(status="False"), True, "status.conditions"),
        (lambda p: p["status"].update(podIP="10.0.0.8"), True, "status addresses"),
        (lambda p: p["status"]["containerStatuses"][0].update(ready=False), True, "status container statuses"),
        (lambda p: p["metadata"]["labels"].update(app="other"), True, "metadata.labels"),
        (lambda p: p["spec"].update(nodeSelector={"zone": "a"}), False, "spec.nodeSelector"),
        (lambda p: p["spec"].update(initContainers=[{"name": "i", "image": "attacker.example/x:1"}]), False, "spec.initContainers"),
        (lambda p: p["spec"].update(terminationGracePeriodSeconds=1), False, "spec.terminationGracePeriodSeconds"),
        (lambda p: p["status"].update(reason="Evicted"), True, "status.reason or status.message"),
        (lambda p: p["status"].update(nominatedNodeName="n9"), True, "status.nominatedNodeName"),
        (lambda p: p["status"].update(hostIP="10.9.9.9"), True, "status addresses"),
        (lambda p: p["status"].update(qosClass="Guaranteed"), True, "status.qosClass"),
        (lambda p: p["status"].update(initContainerStatuses=[{"name": "i", "ready": True}]), True, "status container statuses"),
        (lambda p: p["status"].update(extendedResourceClaimStatus={"resourceClaimName": "x"}), True, "status.extendedResourceClaimStatus"),
        (lambda p: p["status"].update(resourceClaimStatuses=[{"name": "gpu"}]), True, "status.resourceClaimStatuses"),
        (lambda p: p["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}), True, "status.conditions"),
    ],
)  # fmt: skip
def test_anything_else_the_operator_writes_is_refused_by_name(
    policy: dict[str, Any], change: Any, status: bool, named: str
) -> None:
    old = bound_pod()
    new = copy.deepcopy(old)
    change(new)
    message = write(policy, old, new, status=status)
    assert message is not None and named in message, message
    assert "policy dralloc-operator-pod-writes" in message
    # others' writes are not this policy's to judge (the kubelet sets the phase)
    assert write(policy, old, new, status=status, user=KUBELET) is None


def test_a_claim_status_once_recorded_stays(policy: dict[str, Any]) -> None:
    """New entries naming a claim pass (the claim controller's, in-tree); an entry changed or
    removed does not (it would point the kubelet at another claim, or at none)."""
    old = bound_pod()
    old["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]
    for statuses in ([{"name": "gpu", "resourceClaimName": "p-gpu-y"}], []):
        new = copy.deepcopy(old)
        new["status"]["resourceClaimStatuses"] = statuses
        message = write(policy, old, new, status=True)
        assert message is not None and "status.resourceClaimStatuses" in message, statuses


def test_the_node_pin_only_in_the_write_that_lifts_the_gate(policy: dict[str, Any]) -> None:
    """A token could otherwise steer any pod at dralloc's gate to a node of its choosing
    and leave it gated; the pin and the release are one write."""
    old = gated_pod()
    pinned = copy.deepcopy(old)
    pinned["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}  # fmt: skip
    message = write(policy, old, pinned)
    assert message is not None and "spec.affinity" in message


def bystander() -> dict[str, Any]:
    """A pod that asks for no devices (coredns, a node agent)."""
    pod = bound_pod()
    del pod["spec"]["resourceClaims"]
    return pod


def test_only_pods_that_ask_for_devices_may_be_deleted_or_marked_for_disruption(
    policy: dict[str, Any],
) -> None:
    for pod in (bound_pod(), gated_pod()):
        assert admit(policy, {}, operation="DELETE", obj=None, old=pod, user=OPERATOR_SA) is None
    plugin = bystander()  # a device plugin's resource counts: its pods get devices too
    plugin["spec"]["containers"][0]["resources"] = {"requests": {"example.com/gpu": "1"}}
    assert admit(policy, {}, operation="DELETE", obj=None, old=plugin, user=OPERATOR_SA) is None
    refused = admit(policy, {}, operation="DELETE", obj=None, old=bystander(), user=OPERATOR_SA)
    assert refused is not None and "deletion also touches the pod itself" in refused, refused
    assert admit(policy, {}, operation="DELETE", obj=None, old=bystander(), user=KUBELET) is None
    # The condition that goes before a deletion: on pods that ask for devices only.
    target = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "DeletionByDeviceTaintManager",
    }
    for pod, allowed in ((bound_pod(), True), (bystander(), False)):
        marked = copy.deepcopy(pod)
        marked["status"]["conditions"].append(target)
        assert (write(policy, pod, marked, status=True) is None) is allowed
    # A nominated node too: a pod that asks for no devices is no preemptor of dralloc's.
    unbound = bystander()
    del unbound["spec"]["nodeName"]
    nominated = copy.deepcopy(unbound)
    nominated["status"]["nominatedNodeName"] = "n1"
    refused = write(policy, unbound, nominated, status=True)
    assert refused is not None and "status.nominatedNodeName" in refused


def test_only_its_own_gate_may_go(policy: dict[str, Any]) -> None:
    old = gated_pod()
    others_gate_gone = copy.deepcopy(old)
    others_gate_gone["spec"]["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    message = write(policy, old, others_gate_gone)
    assert message is not None and "spec.schedulingGates (other than" in message
    every_gate_gone = copy.deepcopy(old)
    every_gate_gone["spec"]["schedulingGates"] = []
    assert write(policy, old, every_gate_gone) is not None


def test_its_writers_are_the_identities_that_may_act_as_the_operator(
    policy: dict[str, Any],
) -> None:
    """The same users and groups as the identity ConfigMap (and the fencing policy): one
    left out here could rewrite any pod with the operator's role."""
    users, groups = identities(operator_identity())
    old = bound_pod()
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = "attacker.example/backdoor:1"
    for user in users:
        assert write(policy, old, new, user=user) is not None, user
    for group in groups:
        refused = admit(policy, {}, operation="UPDATE", obj=new, old=old, user="m", groups=[group])
        assert refused is not None, group
