"""The claim-allocation ValidatingAdmissionPolicy of manifests/base, evaluated offline.

Only the operator may set or change the allocation of a claim whose devices come from a
managed driver; every other claim status write (reservations, a cleared allocation, device
statuses) passes. tests/e2e/test_one_allocator_policy.py runs the same policy on a real API
server beside kube-scheduler under its own identity.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from operators.settings import Settings

from .admission import BASE, admit, docs

OPERATOR_SA = "system:serviceaccount:dralloc-system:dralloc-operator"
SCHEDULER = "system:kube-scheduler"
KCM_CLAIMS = "system:serviceaccount:kube-system:resource-claim-controller"
POLICY_NAME = "dralloc-claim-allocation"


POLICY_FILE = "claim-allocation-policy.yaml"


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
    assert {r for rule in rules for r in rule["resources"]} == {"resourceclaims/status"}
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


def test_kube_scheduler_allocates_its_extended_resource_claims_of_listed_classes_only(
    policy: dict[str, Any], params: dict[str, Any]
) -> None:
    """It accepts no allocation of them but its own (it deletes such a claim and starts
    again). Any class can be asked for as an extended resource
    (deviceclass.resource.kubernetes.io/<class>), so only the listed classes are its own."""
    old, new = claim(extended=True), claim(GPU, reserved=("p",), extended=True)
    # As shipped: no class listed, refused like any other allocation.
    assert params["data"]["extendedClasses"] == ""
    assert write(policy, params, old, new, SCHEDULER) is not None
    listed = copy.deepcopy(params)
    listed["data"]["extendedClasses"] = "legacy-gpu, other"
    old["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": "legacy-gpu"}
    new["spec"] = copy.deepcopy(old["spec"])
    assert write(policy, listed, old, new, SCHEDULER) is None
    # Only kube-scheduler's, only its marked claims, only of listed classes.
    assert write(policy, listed, old, new, "mallory") is not None
    unmarked_old, unmarked_new = copy.deepcopy(old), copy.deepcopy(new)
    del unmarked_old["metadata"]["annotations"], unmarked_new["metadata"]["annotations"]
    assert write(policy, listed, unmarked_old, unmarked_new, SCHEDULER) is not None
    other = copy.deepcopy(new)
    other["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": "gpu"}
    assert write(policy, listed, old, other, SCHEDULER) is not None
    # Its user is a parameter too.
    renamed = copy.deepcopy(listed)
    renamed["data"]["schedulers"] = "my-scheduler"
    assert write(policy, renamed, old, new, SCHEDULER) is not None
    assert write(policy, renamed, old, new, "my-scheduler") is None


def test_base_guards_dralloc_claims_and_in_tree_the_kubernetes_ones(
    policy: dict[str, Any],
) -> None:
    """A CRD-mode install leaves in-tree DRA's claims to kube-scheduler; the in-tree
    component switches the policy to them."""
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.dralloc.dev"]
    component = BASE.parent / "components" / "in-tree"
    kustomization = yaml.safe_load((component / "kustomization.yaml").read_text())
    [entry] = [
        p for p in kustomization["patches"] if p.get("target", {}).get("name") == POLICY_NAME
    ]
    [operation] = yaml.safe_load((component / entry["path"]).read_text())
    assert operation == {
        "op": "replace",
        "path": "/spec/matchConstraints/resourceRules/0/apiGroups",
        "value": ["resource.k8s.io"],
    }
