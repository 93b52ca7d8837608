"""Pure rules of the resource-claim controller."""

from __future__ import annotations

import json
from typing import Any

import pytest

from operators.api.models import ResourceClaim, ResourceClaimTemplate
from operators.api.podprotocol import DRALLOC, KUBERNETES
from operators.cache.core import (
    FINALIZER,
    PodResourceClaimStatus,
    parse_namespace,
    parse_pod,
    render_claim_statuses,
)
from operators.controllers import claimrules
from operators.controllers.claimrules import PodState, generate_name, plan_claim


def test_short_names_keep_both_parts() -> None:
    assert generate_name("web-0", "gpu") == "web-0-gpu-"


def test_long_names_cut_in_proportion() -> None:
    pod, claim = "p" * 60, "c" * 30
    name = generate_name(pod, claim)
    # 92 characters with hyphens: each part keeps len*57//92 characters, no trailing hyphen
    assert name == "p" * (60 * 57 // 92) + "-" + "c" * (30 * 57 // 92)
    assert len(name) + 5 <= 63


def test_boundary_is_57() -> None:
    pod = "p" * 50
    assert generate_name(pod, "abcde") == pod + "-abcde-"  # 57 exactly: untouched
    assert generate_name(pod, "abcdef") == "p" * 49 + "-abcde"  # 58: both parts cut


def pod(**overrides: Any) -> Any:
    raw: dict[str, Any] = {
        "metadata": {"namespace": "ns", "name": "web", "uid": "pod-uid", "resourceVersion": "1"},
        "spec": {},
        "status": {"phase": "Running"},
    }
    raw["metadata"].update(overrides.pop("metadata", {}))
    raw["status"].update(overrides.pop("status", {}))
    raw["spec"].update(overrides.pop("spec", {}))
    return parse_pod(raw, overrides.pop("protocol", DRALLOC))


def template(admin: bool = False) -> ResourceClaimTemplate:
    return ResourceClaimTemplate.model_validate(
        {
            "metadata": {"namespace": "ns", "name": "t"},
            "spec": {
                "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {"deviceClassName": "gpu", "adminAccess": admin},
                            }
                        ]
                    }
                },
            },
        }
    )


def test_claim_body_from_template() -> None:
    body = claimrules.claim_body(pod(), "gpu", template())
    meta = body["metadata"]
    assert meta["generateName"] == "web-gpu-"
    assert meta["labels"] == {"team": "a"}
    assert meta["annotations"] == {"note": "x", "resource.dralloc.dev/pod-claim-name": "gpu"}
    assert meta["finalizers"] == [FINALIZER]  # saves the allocator a write of its own
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "web",
            "uid": "pod-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert body["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu"
    assert ResourceClaim.model_validate(body).spec.devices.requests[0].name == "gpu"


@pytest.mark.parametrize(
    ("admin", "gate", "labels", "expect"),
    [
        (False, False, {}, ""),
        (True, False, {"resource.dralloc.dev/admin-access": "true"}, "feature is disabled"),
        (True, True, {}, "does not have the label"),
        (True, True, {"resource.dralloc.dev/admin-access": "yes"}, "does not have the label"),
        (True, True, {"resource.dralloc.dev/admin-access": "true"}, ""),
    ],
)
def test_admin_access_rule(admin: bool, gate: bool, labels: dict[str, str], expect: str) -> None:
    namespace = parse_namespace({"metadata": {"name": "ns", "labels": labels}})
    refusal = claimrules.admin_access_refusal(template(admin).spec.spec, namespace, gate)
    assert (expect in refusal) if expect else refusal == ""
    assert bool(refusal) == bool(expect)


def test_statuses_keep_pod_order_and_render_stably() -> None:
    current = (PodResourceClaimStatus(name="b", resource_claim_name="web-b-1"),)
    merged = claimrules.merged_statuses(current, {"a": "web-a-2"}, ["a", "b"])
    assert merged == (
        PodResourceClaimStatus(name="a", resource_claim_name="web-a-2"),
        PodResourceClaimStatus(name="b", resource_claim_name="web-b-1"),
    )
    assert render_claim_statuses(merged) == render_claim_statuses(
        claimrules.merged_statuses(merged, {}, ["a", "b"])
    )


def claim(
    reserved: list[dict[str, str]],
    *,
    allocated: bool = True,
    finalizer: bool = True,
    deleting: bool = False,
    owner: str | None = None,
    other_finalizers: tuple[str, ...] = (),
) -> ResourceClaim:
    meta: dict[str, Any] = {
        "namespace": "ns",
        "name": "c",
        "uid": "claim-uid",
        "resourceVersion": "5",
    }
    if finalizer or other_finalizers:
        meta["finalizers"] = [FINALIZER] * finalizer + list(other_finalizers)
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": owner, "controller": True}
        ]
    status: dict[str, Any] = {}
    if allocated:
        status["allocation"] = {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "d.example.com", "pool": "p", "device": "dev-0"}
                ]
            }
        }
        status["reservedFor"] = reserved
    return ResourceClaim.model_validate({"metadata": meta, "spec": {}, "status": status})


def entry(uid: str, name: str = "web") -> dict[str, str]:
    return {"resource": "pods", "name": name, "uid": uid}


def states(**by_uid: PodState) -> Any:
    return lambda _name, uid: by_uid[uid]


def test_live_reservation_stays() -> None:
    plan = plan_claim(claim([entry("u1")]), states(u1=PodState.IN_USE), None)
    assert plan.nothing


def test_stale_entry_trimmed_others_kept() -> None:
    plan = plan_claim(
        claim([entry("u1"), entry("u2", "b")]), states(u1=PodState.DONE, u2=PodState.IN_USE), None
    )
    assert plan.reserved_for == ({"resource": "pods", "name": "b", "uid": "u2"},)
    assert not plan.deallocate and not plan.remove_finalizer


def test_last_entry_gone_deallocates_then_drops_finalizer() -> None:
    plan = plan_claim(claim([entry("u1")]), states(u1=PodState.GONE), None)
    assert plan.reserved_for == () and plan.deallocate and plan.remove_finalizer
    assert not plan.delete


def test_non_pod_consumers_are_kept() -> None:
    other = {"apiGroup": "example.com", "resource": "jobs", "name": "j", "uid": "u9"}
    plan = plan_claim(claim([entry("u1"), other]), states(u1=PodState.REPLACED), None)
    assert plan.reserved_for == (other,)
    assert not plan.deallocate


def test_unallocated_claim_with_finalizer_is_left_alone() -> None:
    # the allocator's first write (finalizer) before its status write
    plan = plan_claim(claim([], allocated=False), states(), None)
    assert plan.nothing


def test_deleted_claim_let_go_with_its_allocation() -> None:
    # Its devices are free once it is gone, right after the finalizer: no status write first.
    plan = plan_claim(claim([], deleting=True), states(), None)
    assert plan.remove_finalizer and not plan.deallocate and not plan.delete
    reserved = plan_claim(claim([entry("u1")], deleting=True), states(u1=PodState.GONE), None)
    assert reserved.remove_finalizer and not reserved.deallocate
    assert reserved.reserved_for is None


def test_deleted_claim_held_by_another_finalizer_is_deallocated_first() -> None:
    # Another finalizer may keep the object for long: its devices are freed at once.
    held = claim([], deleting=True, other_finalizers=("example.com/backup",))
    plan = plan_claim(held, states(), None)
    assert plan.deallocate and plan.remove_finalizer and not plan.delete


def test_unallocated_generated_claim_of_a_done_pod_is_deleted_then_let_go() -> None:
    # Generated claims carry the finalizer from their creation, allocated or not.
    done = plan_claim(claim([], allocated=False, owner="u1"), states(), PodState.DONE)
    assert done.delete and not done.deallocate and done.remove_finalizer  # after the delete
    deleting = plan_claim(
        claim([], allocated=False, owner="u1", deleting=True), states(), PodState.DONE
    )
    assert deleting.remove_finalizer and not deleting.deallocate and not deleting.delete


def test_generated_claim_of_done_pod_deleted_with_its_allocation() -> None:
    plan = plan_claim(claim([entry("u1")], owner="u1"), states(u1=PodState.DONE), PodState.DONE)
    assert plan.delete and plan.remove_finalizer  # the finalizer after the deletion
    assert not plan.deallocate and plan.reserved_for is None  # no status write
    running = plan_claim(
        claim([entry("u1")], owner="u1"), states(u1=PodState.IN_USE), PodState.IN_USE
    )
    assert not running.delete


def test_reservation_state() -> None:
    assert claimrules.reservation_state("pod-uid", None) is PodState.GONE
    assert claimrules.reservation_state("other", pod()) is PodState.REPLACED
    assert (
        claimrules.reservation_state("pod-uid", pod(status={"phase": "Succeeded"})) is PodState.DONE
    )
    assert (
        claimrules.reservation_state("pod-uid", pod(metadata={"deletionTimestamp": "x"}))
        is PodState.DONE
    )
    scheduled = pod(metadata={"deletionTimestamp": "x"}, spec={"nodeName": "n1"})
    assert claimrules.reservation_state("pod-uid", scheduled) is PodState.IN_USE


def test_claim_statuses_are_written_only_when_they_change() -> None:
    entries = '[{"name": "gpu", "resourceClaimTemplateName": "t"}]'
    fresh = pod(metadata={"annotations": {"resource.dralloc.dev/claims": entries}})
    statuses = claimrules.statuses_update(fresh, {"gpu": "web-gpu-x"})
    assert statuses is not None
    patch, subresource = DRALLOC.statuses_write(statuses)
    assert subresource == ""
    rendered = patch["metadata"]["annotations"]["resource.dralloc.dev/claim-statuses"]
    assert json.loads(rendered) == [{"name": "gpu", "resourceClaimName": "web-gpu-x"}]
    recorded = pod(
        metadata={
            "annotations": {
                "resource.dralloc.dev/claims": entries,
                "resource.dralloc.dev/claim-statuses": rendered,
            }
        }
    )
    assert claimrules.statuses_update(recorded, {"gpu": "web-gpu-x"}) is None
    assert claimrules.statuses_update(fresh, {}) is None  # nothing to record


def test_in_tree_claim_statuses_go_to_the_pod_status() -> None:
    entries = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    fresh = pod(protocol=KUBERNETES, spec={"resourceClaims": entries})
    assert [c.name for c in fresh.claims] == ["gpu"]
    statuses = claimrules.statuses_update(fresh, {"gpu": "web-gpu-x"})
    assert statuses is not None
    patch, subresource = KUBERNETES.statuses_write(statuses)
    assert subresource == "status"
    written = patch["status"]["resourceClaimStatuses"]
    assert written == [{"name": "gpu", "resourceClaimName": "web-gpu-x"}]
    recorded = pod(
        protocol=KUBERNETES,
        spec={"resourceClaims": entries},
        status={"resourceClaimStatuses": written},
    )
    assert recorded.claim_name(recorded.claims[0]) == "web-gpu-x"
    assert claimrules.statuses_update(recorded, {"gpu": "web-gpu-x"}) is None
    # The CRD mode's annotation means nothing in-tree (anyone may write annotations).
    forged = pod(
        protocol=KUBERNETES,
        spec={"resourceClaims": entries},
        metadata={"annotations": {"resource.dralloc.dev/claim-statuses": json.dumps(written)}},
    )
    assert forged.claim_statuses == ()


def test_in_tree_generated_claims_carry_upstream_names() -> None:
    body = claimrules.claim_body(pod(), "gpu", template(), KUBERNETES)
    assert body["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert body["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    assert "resource.dralloc.dev/pod-claim-name" not in body["metadata"]["annotations"]


def test_generated_claim_of_a_deleted_pod_goes_now_with_its_allocation() -> None:
    # Known deleted (our watch saw it): deleted now, not deallocated for the GC to delete.
    plan = plan_claim(claim([entry("u1")], owner="u1"), states(u1=PodState.GONE), PodState.GONE)
    assert plan.delete and plan.remove_finalizer and not plan.deallocate
    unknown = plan_claim(claim([entry("u1")], owner="u1"), states(u1=PodState.GONE), None)
    assert not unknown.delete and unknown.deallocate  # not known deleted: as before
