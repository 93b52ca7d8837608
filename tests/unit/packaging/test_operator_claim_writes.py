"""The operator-claim-writes ValidatingAdmissionPolicy of manifests/base, evaluated offline.

The operator's identity may change on ResourceClaims only its protocol: claims it makes for a
pod (from the controller's own bodies), the delete-protection finalizer, the allocation and
reservations with its summaries and condition, device statuses only cleared, and deletion of
claims made for a pod. What it might try with a stolen token (a label, an annotation, another
controller's finalizer, a driver's device status, a claim of a user deleted) is refused, naming
the field. tests/e2e/test_security.py runs it on a real API server with the operator's token.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from operators.api.models import ResourceClaim, ResourceClaimTemplate
from operators.api.podprotocol import DRALLOC, KUBERNETES, PodProtocol
from operators.cache.core import parse_pod
from operators.controllers import claimrules, claimstatus
from tests.unit.controllers.fakes import apply_merge_patch

from .admission import admit, operator_identity, policy_and_binding
from .test_claim_allocation_fencing import identities
from .test_claim_allocation_policy import OPERATOR_SA

PROTOCOLS = pytest.mark.parametrize("protocol", [DRALLOC, KUBERNETES], ids=["crd", "in-tree"])


@pytest.fixture
def policy() -> dict[str, Any]:
    return policy_and_binding("operator-claim-writes.yaml")[0]


def made_for_pod(protocol: PodProtocol) -> dict[str, Any]:
    """A claim as the claim controller makes it for a pod's template entry."""
    pod = parse_pod(
        {
            "metadata": {"namespace": "team-a", "name": "train", "uid": "pod-uid"},
            "spec": {},
            "status": {"phase": "Pending"},
        },
        protocol,
    )
    template = ResourceClaimTemplate.model_validate(
        {
            "metadata": {"namespace": "team-a", "name": "one-gpu"},
            "spec": {
                "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
            },
        }
    )  # fmt: skip
    body = claimrules.claim_body(pod, "gpu", template, protocol)
    body["metadata"]["name"] = "train-gpu-x7k2q"
    body["metadata"]["uid"] = "claim-uid"
    body["status"] = {}
    return body


def users_claim() -> dict[str, Any]:
    """A claim a user made by hand (no owner), with a finalizer of another controller."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "shared", "namespace": "team-a", "uid": "u2",
            "labels": {"team": "a"}, "finalizers": ["example.com/backup"],
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {},
    }  # fmt: skip


def allocation() -> dict[str, Any]:
    results = [{"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}]
    return {"devices": {"results": results}, "allocationTimestamp": "2026-12-06T12:00:00Z"}


def reported_device() -> dict[str, Any]:
    """What a driver reports in status.devices about the device it prepared (its network
    configuration, here)."""
    return {
        "driver": "gpu.example.com",
        "pool": "n1",
        "device": "gpu-0",
        "data": {"ip": "10.1.0.7"},
    }


def request(
    policy: dict[str, Any],
    operation: str,
    new: dict[str, Any] | None,
    old: dict[str, Any] | None = None,
    *,
    status: bool = False,
    user: str = OPERATOR_SA,
    groups: list[str] | None = None,
) -> str | None:
    return admit(
        policy, {}, operation=operation, obj=new, old=old, user=user, groups=groups,
        sub_resource="status" if status else "", resource="resourceclaims",
    )  # fmt: skip


@PROTOCOLS
def test_the_operators_own_writes_pass(policy: dict[str, Any], protocol: PodProtocol) -> None:
    """Every claim write the controllers make, built by their own helpers, in both modes."""
    made = made_for_pod(protocol)
    assert request(policy, "CREATE", made) is None
    # The finalizer, taken off and put back (a claim made without it, or one released).
    bare = apply_merge_patch(made, {"metadata": {"finalizers": None}})
    assert request(policy, "UPDATE", bare, made) is None
    assert request(policy, "UPDATE", made, bare) is None
    # The allocation with its reservation (and, on the CRDs, the summaries and condition).
    reserved = [{"resource": "pods", "name": "train", "uid": "pod-uid"}]
    status = claimstatus.summarized({"allocation": allocation(), "reservedFor": reserved}, protocol)
    if protocol.claim_conditions:
        status["conditions"] = [{"type": "Allocated", "status": "True", "reason": "Allocated"}]
    allocated = apply_merge_patch(made, {"status": status})
    assert request(policy, "UPDATE", allocated, made, status=True) is None
    # A driver reports its device; the operator later releases the claim: everything goes.
    driver = reported_device()
    prepared = apply_merge_patch(allocated, {"status": {"devices": [driver]}})
    released = claimstatus.summarized(
        {"reservedFor": None, **claimstatus.deallocation(protocol)}, protocol
    )
    if protocol.claim_conditions:
        released["conditions"] = None
    assert (
        request(
            policy,
            "UPDATE",
            apply_merge_patch(prepared, {"status": released}),
            prepared,
            status=True,
        )
        is None
    )
    # A reservation trimmed; the claim deleted once its pod is done.
    trimmed = claimstatus.summarized({"reservedFor": None}, protocol)
    assert (
        request(
            policy,
            "UPDATE",
            apply_merge_patch(prepared, {"status": trimmed}),
            prepared,
            status=True,
        )
        is None
    )
    assert request(policy, "DELETE", None, made) is None


def test_anything_else_the_operator_writes_to_a_claim_is_refused_by_name(
    policy: dict[str, Any],
) -> None:
    made = made_for_pod(KUBERNETES)
    driver = reported_device()
    allocated = apply_merge_patch(
        made, {"status": {"allocation": allocation(), "devices": [driver]}}
    )
    forged = {**driver, "data": {"ip": "203.0.113.9"}}
    cases: list[tuple[str, str, dict[str, Any] | None, dict[str, Any] | None, bool]] = [
        ("metadata.labels", "UPDATE", apply_merge_patch(made, {"metadata": {"labels": {"team": "b"}}}), made, False),
        ("metadata.annotations", "UPDATE", apply_merge_patch(made, {"metadata": {"annotations": {"note": "y"}}}), made, False),
        ("metadata.ownerReferences", "UPDATE", apply_merge_patch(made, {"metadata": {"ownerReferences": None}}), made, False),
        ("metadata.finalizers (other than delete-protection)", "UPDATE", apply_merge_patch(users_claim(), {"metadata": {"finalizers": None}}), users_claim(), False),
        ("spec", "UPDATE", apply_merge_patch(made, {"spec": {"devices": {"requests": []}}}), made, False),
        ("status.devices", "UPDATE", apply_merge_patch(allocated, {"status": {"devices": [forged]}}), allocated, True),
        ("status.devices", "UPDATE", apply_merge_patch(made, {"status": {"allocation": allocation(), "devices": [forged]}}), made, True),
        ("status.conditions (other than Allocated)", "UPDATE", apply_merge_patch(made, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}), made, True),
        ("an owner other than one pod", "CREATE", users_claim() | {"metadata": {**users_claim()["metadata"], "finalizers": []}}, None, False),
        ("metadata.finalizers (other than delete-protection)", "CREATE", apply_merge_patch(made, {"metadata": {"finalizers": ["example.com/backup"]}}), None, False),
        ("the claim itself (it was not made for a pod)", "DELETE", None, users_claim(), False),
    ]  # fmt: skip
    for field, operation, new, old, status in cases:
        message = request(policy, operation, new, old, status=status)
        assert message is not None and field in message, (field, operation, message)
        assert "policy dralloc-operator-claim-writes" in message
    # An owner that is a pod but not its controller, or a second controller: no pod's claim.
    for owners in (
        [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "1", "controller": False}],
        [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "r",
                "uid": "2",
                "controller": True,
            }
        ],
    ):
        foreign = apply_merge_patch(made, {"metadata": {"ownerReferences": owners}})
        assert request(policy, "DELETE", None, foreign) is not None, owners
        assert request(policy, "CREATE", foreign) is not None, owners


def test_nobody_elses_claim_writes_are_judged(policy: dict[str, Any]) -> None:
    """kube-scheduler, kcm, the drivers and users keep their rights (other policies and RBAC
    judge them): the same writes pass for them."""
    made = made_for_pod(KUBERNETES)
    driver = {"driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}
    allocated = apply_merge_patch(made, {"status": {"allocation": allocation()}})
    reported = apply_merge_patch(allocated, {"status": {"devices": [driver]}})
    for user in ("system:node:n1", "system:kube-scheduler", "alice"):
        assert request(policy, "UPDATE", reported, allocated, status=True, user=user) is None
        assert request(policy, "DELETE", None, users_claim(), user=user) is None


def test_its_writers_are_the_identities_that_may_act_as_the_operator(
    policy: dict[str, Any],
) -> None:
    """The same users and groups as the identity ConfigMap (and the fencing policy): one
    left out here could rewrite or delete any claim with the operator's role."""
    users, groups = identities(operator_identity())
    assert users
    for user in users:
        assert request(policy, "DELETE", None, users_claim(), user=user) is not None, user
    for group in groups:
        refused = request(policy, "DELETE", None, users_claim(), user="m", groups=[group])
        assert refused is not None, group


def test_another_writers_conditions_pass_as_the_operator_writes_them_back(
    policy: dict[str, Any],
) -> None:
    """On its CRDs the operator rewrites the claim's other conditions as its model read them
    (a missing message becomes "", a timestamp gets another form): only their type, status
    and reason must stay, or a tool's condition would stop every allocation of the claim."""
    for foreign in (
        {"type": "example.com/Checked", "status": "True", "reason": "Ok", "lastTransitionTime": "2026-12-06T12:00:00Z"},
        {"type": "example.com/Checked", "status": "True", "reason": "Ok", "message": "m", "lastTransitionTime": "2026-12-06T12:00:00.25Z"},
    ):  # fmt: skip
        old = apply_merge_patch(made_for_pod(DRALLOC), {"metadata": {"resourceVersion": "5"}})
        old["status"] = {"conditions": [foreign]}
        now = datetime.datetime.now(datetime.UTC)
        conditions = claimstatus.updated_conditions(
            ResourceClaim.model_validate(old), "True", "Allocated", "allocated on node n1", now
        )
        assert conditions is not None and conditions[0] != foreign, "written back otherwise"
        reserved = [{"resource": "pods", "name": "train", "uid": "pod-uid"}]
        status = claimstatus.summarized(
            {"allocation": allocation(), "reservedFor": reserved}, DRALLOC
        )
        new = apply_merge_patch(old, {"status": {**status, "conditions": conditions}})
        assert request(policy, "UPDATE", new, old, status=True) is None, foreign
        changed = apply_merge_patch(
            new, {"status": {"conditions": [{**foreign, "status": "False"}]}}
        )
        refused = request(policy, "UPDATE", changed, old, status=True)
        assert refused is not None and "status.conditions (other than Allocated)" in refused


def test_what_protects_an_allocated_claim_stays_while_it_is_allocated(
    policy: dict[str, Any],
) -> None:
    """Its devices' statuses go only with the allocation, and delete-protection only once
    the claim is deallocated or being deleted (a token that could take both off an allocated
    claim could make its devices look free while a pod uses them)."""
    driver = reported_device()
    allocated = apply_merge_patch(
        made_for_pod(KUBERNETES), {"status": {"allocation": allocation(), "devices": [driver]}}
    )
    wiped = apply_merge_patch(allocated, {"status": {"devices": None}})
    refused = request(policy, "UPDATE", wiped, allocated, status=True)
    assert refused is not None and "with the allocation" in refused
    unprotected = apply_merge_patch(allocated, {"metadata": {"finalizers": None}})
    refused = request(policy, "UPDATE", unprotected, allocated)
    assert refused is not None and "delete-protection off a claim still allocated" in refused
    deleting = apply_merge_patch(
        allocated, {"metadata": {"deletionTimestamp": "2026-12-06T12:00:00Z"}}
    )
    done = apply_merge_patch(deleting, {"metadata": {"finalizers": None}})
    assert request(policy, "UPDATE", done, deleting) is None
