"""The fencing ValidatingAdmissionPolicy of manifests/base, evaluated offline.

Of the operator's writes, only the Lease holder's may set or change an allocation: a replica
by its pod's name (the API server's userInfo.extra of a pod-bound token), a user outside the
cluster by its user name (``<user>`` or ``<user>/...`` holds the Lease). Releases and other
writers pass (the claim-allocation policy judges those). tests/e2e/test_fencing.py runs it on
a real API server with two operators of pod-bound tokens.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from .admission import admit, docs, operator_identity
from .test_claim_allocation_policy import GPU, OPERATOR_SA, OTHER_GPU, SCHEDULER, claim

POD_NAME = "authentication.kubernetes.io/pod-name"


@pytest.fixture
def policy() -> dict[str, Any]:
    found = docs("claim-allocation-fencing.yaml")
    return next(d for d in found if d["kind"] == "ValidatingAdmissionPolicy")


def lease(holder: str | None) -> dict[str, Any]:
    spec = {"holderIdentity": holder} if holder is not None else {}
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "dralloc-operator", "namespace": "dralloc-system"},
        "spec": spec,
    }


def write(
    policy: dict[str, Any],
    holder: str | None,
    old: dict[str, Any],
    new: dict[str, Any],
    user: str = OPERATOR_SA,
    pod: str | None = None,
) -> str | None:
    extra = {POD_NAME: [pod]} if pod is not None else None
    return admit(
        policy, lease(holder), operation="UPDATE", obj=new, old=old, user=user, extra=extra,
        sub_resource="status",
    )  # fmt: skip


def test_the_replica_holding_the_lease_allocates(policy: dict[str, Any]) -> None:
    assert write(policy, "dralloc-7d9f-a", claim(), claim(GPU), pod="dralloc-7d9f-a") is None


def test_a_replica_that_does_not_hold_the_lease_is_refused(policy: dict[str, Any]) -> None:
    message = write(policy, "dralloc-7d9f-a", claim(), claim(GPU), pod="dralloc-7d9f-b")
    assert message is not None
    assert "ResourceClaim team-a/c" in message
    assert "Lease dralloc-system/dralloc-operator" in message
    assert 'held by "dralloc-7d9f-a"; this writer is pod "dralloc-7d9f-b"' in message
    # changing an allocation is refused as setting one is
    assert write(policy, "x", claim(GPU), claim(OTHER_GPU), pod="dralloc-7d9f-b") is not None


def test_a_fenced_replica_may_give_devices_back_and_touch_nothing_else(
    policy: dict[str, Any],
) -> None:
    stale = "dralloc-7d9f-b"
    assert write(policy, "dralloc-7d9f-a", claim(GPU), claim(), pod=stale) is None
    reserved = claim(GPU, reserved=("p",))
    assert write(policy, "dralloc-7d9f-a", claim(GPU), reserved, pod=stale) is None


def test_a_missing_holder_refuses_every_fenced_allocation(policy: dict[str, Any]) -> None:
    assert write(policy, None, claim(), claim(GPU), pod="dralloc-7d9f-a") is not None
    assert write(policy, "", claim(), claim(GPU), pod="dralloc-7d9f-a") is not None


def test_a_token_of_no_pod_is_judged_by_its_user_name(policy: dict[str, Any]) -> None:
    """A legacy (secret) token of the ServiceAccount names no pod: the holder must then be
    the user name, which no replica's identity (its pod name) is."""
    assert write(policy, "dralloc-7d9f-a", claim(), claim(GPU)) is not None
    assert write(policy, f"{OPERATOR_SA}/laptop-1", claim(), claim(GPU)) is None
    assert write(policy, OPERATOR_SA, claim(), claim(GPU)) is None
    # a prefix of another name is not the name
    assert write(policy, f"{OPERATOR_SA}-evil/x", claim(), claim(GPU)) is not None


def test_writers_not_named_are_left_to_the_claim_allocation_policy(
    policy: dict[str, Any],
) -> None:
    assert write(policy, "dralloc-7d9f-a", claim(), claim(GPU), user=SCHEDULER) is None
    assert write(policy, "dralloc-7d9f-a", claim(), claim(GPU), user="alice") is None


def test_only_the_holder_makes_claims(policy: dict[str, Any]) -> None:
    """A second operator's claim controller would make a second claim for a pod's template
    entry: claim creation is fenced as allocations are."""
    made = claim()
    del made["status"]
    create = functools.partial(admit, policy, operation="CREATE", obj=made, user=OPERATOR_SA)
    assert create(lease("op-a"), extra={POD_NAME: ["op-a"]}) is None
    message = create(lease("op-a"), extra={POD_NAME: ["op-b"]})
    assert message is not None and message.startswith("creating ResourceClaim team-a/c:")
    assert admit(policy, lease("op-a"), operation="CREATE", obj=made, user="alice") is None


def pod_object(name: str = "p", *, claims: str = "spec") -> dict[str, Any]:
    """A pod asking for devices (``spec``: in-tree; ``annotation``: dralloc's CRDs; ``""``:
    none)."""
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
        "spec": {},
    }  # fmt: skip
    if claims == "spec":
        body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    elif claims == "annotation":
        body["metadata"]["annotations"] = {"resource.dralloc.dev/claims": "[]"}
    return body


def test_only_the_holder_writes_and_deletes_pods_that_ask_for_devices(
    policy: dict[str, Any],
) -> None:
    """A second operator could lift the gate of a pod the holder allocated (and its record
    on the pod would make the holder stand down): the operator's writes of claims pods are
    fenced too. Other pods stay the fenced users' own (a laptop user listed in fencedUsers
    still manages coredns)."""
    for claims in ("spec", "annotation"):
        before = pod_object(claims=claims)
        after = {**before, "spec": {**before["spec"], "schedulingGates": []}}
        for operation, obj, old in (("UPDATE", after, before), ("DELETE", None, before)):
            holder = admit(
                policy, lease("op-a"), operation=operation, obj=obj, old=old, user=OPERATOR_SA,
                extra={POD_NAME: ["op-a"]},
            )  # fmt: skip
            assert holder is None, operation
            other = admit(
                policy, lease("op-a"), operation=operation, obj=obj, old=old, user=OPERATOR_SA,
                extra={POD_NAME: ["op-b"]},
            )  # fmt: skip
            assert other is not None and f"{operation.lower()} of Pod team-a/p:" in other, other
            anyone = admit(policy, lease("op-a"), operation=operation, obj=obj, old=old, user="x")
            assert anyone is None
    plain = pod_object(claims="")
    for operation, obj, old in (("UPDATE", plain, plain), ("DELETE", None, plain)):
        stale = admit(
            policy, lease("op-a"), operation=operation, obj=obj, old=old, user=OPERATOR_SA,
            extra={POD_NAME: ["op-b"]},
        )  # fmt: skip
        assert stale is None, f"{operation} of a pod without claims was fenced"


def fenced(policy: dict[str, Any], user: str, groups: list[str]) -> bool:
    """Whether a write of this writer is judged by the Lease (refused when it holds none)."""
    refused = admit(
        policy, lease("someone-else"), operation="UPDATE", obj=claim(GPU), old=claim(),
        user=user, groups=groups, sub_resource="status",
    )  # fmt: skip
    return refused is not None


def identities(config_map: dict[str, Any]) -> tuple[list[str], list[str]]:
    data = config_map["data"]
    return (
        [u for u in str(data["usernames"]).split(",") if u],
        [g for g in str(data.get("groups") or "").split(",") if g],
    )


def test_every_identity_that_may_act_as_the_operator_is_fenced(policy: dict[str, Any]) -> None:
    """The pod-protocol and claim-allocation policies let the ConfigMap's users and groups act
    as the operator; one the fencing policy did not name would allocate without the Lease."""
    users, groups = identities(operator_identity())
    assert users, "the ConfigMap names the operator"
    for user in users:
        assert fenced(policy, user, []), user
    for group in groups:
        assert fenced(policy, "member", [group]), group
    assert not fenced(policy, "someone", ["system:authenticated"])
