"""The claim-allocation ValidatingAdmissionPolicy of manifests/base, evaluated offline.

Only the operator may set or change the allocation of a claim whose devices come from a
managed driver; every other claim status write (reservations, a cleared allocation, device
statuses) passes. tests/e2e/test_one_allocator_policy.py runs the same policy on a real API
server beside kube-scheduler under its own identity.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from operators.settings import Settings

from .admission import admit, docs

OPERATOR_SA = "system:serviceaccount:dralloc-system:dralloc-operator"
SCHEDULER = "system:kube-scheduler"
KCM_CLAIMS = "system:serviceaccount:kube-system:resource-claim-controller"


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    return next(d for d in docs("claim-allocation-policy.yaml") if d["kind"].endswith("Policy"))


@pytest.fixture(scope="module")
def binding() -> dict[str, Any]:
    return next(d for d in docs("claim-allocation-policy.yaml") if d["kind"].endswith("Binding"))


@pytest.fixture(scope="module")
def params() -> dict[str, Any]:
    return docs("pod-protocol-identity.yaml")[0]


EXTENDED = "resource.kubernetes.io/extended-resource-claim"


def claim(
    *devices: tuple[str, str], reserved: tuple[str, ...] = (), extended: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "team-a"},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": {},
    }
    if devices:
        results = [
            {"request": "gpu", "driver": driver, "pool": "node-1", "device": device}
            for driver, device in devices
        ]
        body["status"]["allocation"] = {"devices": {"results": results}}
    if extended:
        body["metadata"]["annotations"] = {EXTENDED: "true"}
    if reserved:
        body["status"]["reservedFor"] = [
            {"resource": "pods", "name": n, "uid": f"uid-{n}"} for n in reserved
        ]
    return body


GPU = ("gpu.example.com", "gpu-0")
OTHER_GPU = ("gpu.example.com", "gpu-1")
NIC = ("nic.example.com", "nic-0")


def write(
    policy: dict[str, Any],
    params: dict[str, Any],
    old: dict[str, Any],
    new: dict[str, Any],
    user: str,
) -> str | None:
    return admit(
        policy, params, operation="UPDATE", obj=new, old=old, user=user, sub_resource="status"
    )


def test_kube_scheduler_may_not_allocate(policy: dict[str, Any], params: dict[str, Any]) -> None:
    message = write(policy, params, claim(), claim(GPU, reserved=("p",)), SCHEDULER)
    assert message is not None
    assert "ResourceClaim team-a/c" in message
    assert "gpu.example.com" in message
    assert f'user "{SCHEDULER}" is not the dralloc operator' in message


def test_nobody_but_the_operator_may_change_an_allocation(
    policy: dict[str, Any], params: dict[str, Any]
) -> None:
    allocated = claim(GPU, reserved=("p",))
    for user in (SCHEDULER, KCM_CLAIMS, "mallory"):
        assert write(policy, params, allocated, claim(OTHER_GPU, reserved=("p",)), user)
    assert write(policy, params, allocated, claim(OTHER_GPU, reserved=("p",)), OPERATOR_SA) is None


def test_the_operator_allocates(policy: dict[str, Any], params: dict[str, Any]) -> None:
    assert write(policy, params, claim(), claim(GPU, reserved=("p",)), OPERATOR_SA) is None
    with_group = copy.deepcopy(params)
    with_group["data"]["groups"] = "dralloc-operators"
    assert (
        admit(
            policy,
            with_group,
            operation="UPDATE",
            obj=claim(GPU),
            old=claim(),
            user="laptop",
            groups=["dralloc-operators"],
            sub_resource="status",
        )
        is None
    )


def test_reserving_clearing_and_device_statuses_pass(
    policy: dict[str, Any], params: dict[str, Any]
) -> None:
    allocated = claim(GPU)
    # kube-scheduler reserves an allocated claim for the pod it binds.
    assert write(policy, params, allocated, claim(GPU, reserved=("p",)), SCHEDULER) is None
    # kcm drops a gone pod's reservation, and deallocates an unreserved claim.
    assert write(policy, params, claim(GPU, reserved=("p",)), allocated, KCM_CLAIMS) is None
    assert write(policy, params, allocated, claim(), KCM_CLAIMS) is None
    # kube-scheduler's fallback clears an allocation too.
    assert write(policy, params, allocated, claim(), SCHEDULER) is None
    # A driver writes the device statuses of what it prepared.
    prepared = claim(GPU, reserved=("p",))
    prepared["status"]["devices"] = [
        {"driver": GPU[0], "pool": "node-1", "device": GPU[1], "conditions": []}
    ]
    assert write(policy, params, claim(GPU, reserved=("p",)), prepared, "gpu-driver") is None


def test_drivers_not_listed_are_anyones(policy: dict[str, Any], params: dict[str, Any]) -> None:
    listed = copy.deepcopy(params)
    listed["data"]["drivers"] = "gpu.example.com, fpga.example.com"
    assert write(policy, listed, claim(), claim(NIC), SCHEDULER) is None
    assert write(policy, listed, claim(), claim(GPU), SCHEDULER) is not None
    assert write(policy, listed, claim(), claim(NIC, GPU), SCHEDULER) is not None
    # The ConfigMap as shipped, and one without the key, guard every driver.
    assert params["data"]["drivers"] == "*"
    unlisted = copy.deepcopy(params)
    del unlisted["data"]["drivers"]
    assert write(policy, unlisted, claim(), claim(NIC), SCHEDULER) is not None


def test_binding_fails_closed_and_leaves_the_control_plane_out(
    policy: dict[str, Any], binding: dict[str, Any], params: dict[str, Any]
) -> None:
    assert policy["spec"]["failurePolicy"] == "Fail"
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {g for r in rules for g in r["apiGroups"]} == {"resource.k8s.io", "resource.dralloc.dev"}
    assert {r for rule in rules for r in rule["resources"]} == {
        "resourceclaims",
        "resourceclaims/status",
    }
    spec = binding["spec"]
    assert spec["policyName"] == policy["metadata"]["name"]
    assert spec["validationActions"] == ["Deny"]
    ref = spec["paramRef"]
    assert (ref["name"], ref["namespace"], ref["parameterNotFoundAction"]) == (
        params["metadata"]["name"],
        params["metadata"]["namespace"],
        "Deny",
    )
    [expression] = spec["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert expression["operator"] == "NotIn"
    assert set(expression["values"]) == {"kube-system", "kube-node-lease", "dralloc-system"}


def test_the_operators_unserved_namespaces_are_the_bindings() -> None:
    """Dralloc leaves to kube-scheduler exactly the namespaces the binding leaves out: any
    other would wait for an allocator that is refused, or be allocated by two."""
    [expression] = next(d for d in docs("claim-allocation-policy.yaml") if "Binding" in d["kind"])[
        "spec"
    ]["matchResources"]["namespaceSelector"]["matchExpressions"]
    unserved = {n.strip() for n in Settings().unserved_namespaces.split(",")}
    assert unserved == set(expression["values"])


def test_kube_scheduler_allocates_the_claims_it_made_for_extended_resources(
    policy: dict[str, Any], params: dict[str, Any]
) -> None:
    """It accepts no allocation of them but its own (it deletes such a claim and starts
    again), so the policy leaves them to it: to kube-scheduler only."""
    old, new = claim(extended=True), claim(GPU, reserved=("p",), extended=True)
    assert write(policy, params, old, new, SCHEDULER) is None
    assert write(policy, params, old, new, "mallory") is not None
    # Its user is a parameter.
    renamed = copy.deepcopy(params)
    renamed["data"]["schedulers"] = "my-scheduler"
    assert write(policy, renamed, old, new, SCHEDULER) is not None
    assert write(policy, renamed, old, new, "my-scheduler") is None


def test_only_kube_scheduler_marks_a_claim_as_an_extended_resources_claim(
    policy: dict[str, Any], params: dict[str, Any]
) -> None:
    marked = claim(extended=True)
    message = admit(policy, params, operation="CREATE", obj=marked, user="mallory")
    assert message is not None and EXTENDED in message and 'user "mallory"' in message
    assert admit(policy, params, operation="CREATE", obj=marked, user=SCHEDULER) is None
    # Marking one later is refused too (both through the claim and its status).
    for sub_resource in ("", "status"):
        assert admit(
            policy, params, operation="UPDATE", obj=marked, old=claim(), user="mallory",
            sub_resource=sub_resource,
        )  # fmt: skip
    # A claim kube-scheduler marked may still be written by others (kcm drops a gone pod's
    # reservation, a user labels it); unmarked claims are anyone's to create.
    reserved = claim(GPU, reserved=("p",), extended=True)
    assert write(policy, params, reserved, claim(GPU, extended=True), KCM_CLAIMS) is None
    assert admit(policy, params, operation="CREATE", obj=claim(), user="mallory") is None
