"""Pure decisions of the resource-claim controller (no I/O, unit-tested on their own).

Naming and truncation of generated claims, the claim body built from a template, the
admin-access rule, which ``reservedFor`` entries are stale, and what a claim needs next;
which claims are a pod's own, and what its devices annotation must say (docs/design.md
"Trust": the claims are the truth, the annotation only reports them).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from operators.api.annotations import PodClaimDevices, format_pod_devices
from operators.api.extendedresources import ExtendedClaim
from operators.api.models import ResourceClaim, ResourceClaimTemplate
from operators.api.podprotocol import DRALLOC, PodProtocol
from operators.cache.core import (
    Namespace,
    Pod,
    PodResourceClaim,
    PodResourceClaimStatus,
)
from operators.cache.informer import Key

REASON_DEVICES_CORRECTED = "DevicesAnnotationCorrected"
"""Event reason: a pod's devices annotation disagreed with its claims and was corrected."""
MAX_GENERATE_NAME_BASE = 57  # 63 minus a hyphen and the API server's 5 random characters


def generate_name(pod_name: str, pod_claim_name: str) -> str:
    """``<pod>-<claim>-``; if too long, both parts cut in proportion to their length.

    Mirrors upstream exactly, including that the truncated form has no trailing hyphen.
    """
    name = f"{pod_name}-{pod_claim_name}-"
    if len(name) <= MAX_GENERATE_NAME_BASE:
        return name
    total = len(name)
    pod_part = pod_name[: len(pod_name) * MAX_GENERATE_NAME_BASE // total]
    claim_part = pod_claim_name[: len(pod_claim_name) * MAX_GENERATE_NAME_BASE // total]
    return f"{pod_part}-{claim_part}"


def requests_admin_access(spec: Any) -> bool:
    """Does a claim spec (model) ask for admin access in any request?"""
    for request in spec.devices.requests:
        if request.exactly is not None and request.exactly.admin_access:
            return True
    return False


def admin_access_refusal(spec: Any, namespace: Namespace | None, gate_enabled: bool) -> str:
    """Why a claim with this spec must not exist in this namespace ('' = it may).

    Upstream's API server refuses such claims at admission; dralloc has no admission for its
    claims, so the claim controller checks before creating one from a template and the
    allocator before allocating one written directly.
    """
    if not requests_admin_access(spec):
        return ""
    if not gate_enabled:
        return (
            "admin access is requested, but the feature is disabled (feature gate DRAAdminAccess)"
        )
    if namespace is None or not namespace.allows_admin_access:
        ns, label = (namespace.name, namespace.admin_access_label) if namespace else ("?", "")
        return (
            f'admin access is requested, but namespace "{ns}" does not have the label '
            f'"{label or DRALLOC.admin_access_label}: true"'
        )
    return ""


def owned_by(pod: Pod) -> dict[str, Any]:
    """The owner reference of a claim made for one pod: it goes with the pod."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": pod.name,
        "uid": pod.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def claim_body(
    pod: Pod,
    pod_claim_name: str,
    template: ResourceClaimTemplate,
    protocol: PodProtocol = DRALLOC,
) -> dict[str, Any]:
    """The ResourceClaim to create for one template entry of a pod.

    It carries the mode's delete-protection finalizer from the start: upstream's scheduler adds it
    in a write of its own just before the allocation, and for a claim made to be allocated
    that write is pure cost (one request, one watch event, one more step before the pod can
    run). If the claim goes away unallocated, :func:`plan_claim` drops the finalizer.
    """
    template_meta = template.spec.metadata
    annotations = dict(template_meta.annotations or {})
    annotations[protocol.pod_claim_name_annotation] = pod_claim_name
    metadata: dict[str, Any] = {
        "generateName": generate_name(pod.name, pod_claim_name),
        "namespace": pod.namespace,
        "annotations": annotations,
        "finalizers": [protocol.finalizer],
        "ownerReferences": [owned_by(pod)],
    }
    if template_meta.labels:
        metadata["labels"] = dict(template_meta.labels)
    return {
        "apiVersion": template.api_version,
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": template.spec.spec.to_kube(),
    }


def extended_claim_body(pod: Pod, extended: ExtendedClaim, protocol: PodProtocol) -> dict[str, Any]:
    """The ResourceClaim a pod's DRA extended resources became (see api.extendedresources):
    named as the webhook chose, owned by the pod, finalizer from the start as above."""
    return {
        "apiVersion": f"{protocol.group}/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": extended.claim_name,
            "namespace": pod.namespace,
            "finalizers": [protocol.finalizer],
            "ownerReferences": [owned_by(pod)],
        },
        "spec": extended.claim_spec(),
    }


def unserved_extended_resources(pod: Pod, mapping: Mapping[str, str]) -> list[str]:
    """``resource (DeviceClass class)`` for each DRA extended resource an unbound pod asks
    for that a class backs: it passed the webhook's translation by (the webhook was away,
    or the class came later), so no claim serves it, and kube-scheduler's own allocation
    is refused (or would be a second allocator)."""
    if pod.node_name or pod.done or pod.deleting:
        return []
    return [
        f"{name} (DeviceClass {mapping[name]})"
        for name in sorted(pod.needs.requests)
        if "/" in name and name in mapping
    ]


def owner_pod_uid(claim: ResourceClaim) -> str | None:
    """The UID of the pod that controls this claim (it was generated for it), if any."""
    for owner in claim.metadata.owner_references or ():
        if owner.controller and owner.kind == "Pod" and owner.api_version == "v1":
            return owner.uid
    return None


def pod_claim_name_of(claim: ResourceClaim, protocol: PodProtocol = DRALLOC) -> str | None:
    return (claim.metadata.annotations or {}).get(protocol.pod_claim_name_annotation)


CLAIMS_BY_OWNER_INDEX = "claims-by-owner"
PODS_BY_UID_INDEX = "pods-by-uid"


def owner_uid_keys(claim: ResourceClaim) -> list[str]:
    """The :data:`CLAIMS_BY_OWNER_INDEX` values: the UID of the pod a claim was made for."""
    owner = owner_pod_uid(claim)
    return [owner] if owner else []


def pod_uid_keys(pod: Pod) -> list[str]:
    """The :data:`PODS_BY_UID_INDEX` values."""
    return [pod.uid]


def generated_claim_name(
    owned: Iterable[ResourceClaim], pod_claim_name: str, protocol: PodProtocol = DRALLOC
) -> str | None:
    """Among the claims a pod owns, the one generated for its entry ``pod_claim_name``.

    The pod's claim-statuses annotation records the same name, but may not be written yet:
    the allocation controller writes it together with the allocation (one pod write, not
    two), so it finds the claim this way in the meantime.
    """
    for claim in owned:
        if pod_claim_name_of(claim, protocol) == pod_claim_name:
            return claim.metadata.name or None
    return None


def own_claim(
    pod: Pod,
    entry: PodResourceClaim,
    get: Callable[[str], ResourceClaim | None],
    owned: Iterable[ResourceClaim],
    protocol: PodProtocol = DRALLOC,
) -> ResourceClaim | None:
    """The claim behind one of the pod's entries, if it is the pod's to use.

    A named claim (``resourceClaimName``) is looked up in the pod's namespace: a name cannot
    point anywhere else. A template entry's claim must have been generated for this pod (the
    pod is its controlling owner), whatever the pod's claim-statuses annotation says: a name
    recorded there that belongs to another pod's claim is not this pod's claim. ``get`` looks
    a claim up by name in the pod's namespace; ``owned`` are the claims the pod owns.
    """
    if entry.resource_claim_name is not None:
        return get(entry.resource_claim_name)
    owned = list(owned)
    for name in (pod.claim_name(entry), generated_claim_name(owned, entry.name, protocol)):
        claim = get(name) if name else None
        if claim is not None and owner_pod_uid(claim) == pod.uid:
            return claim
    return None


def reserved_for(claim: ResourceClaim, pod_uid: str) -> bool:
    """Is the claim allocated and reserved for the pod with this UID? (docs/design.md "Trust")"""
    status = claim.status
    return (
        status is not None
        and status.allocation is not None
        and any(entry.uid == pod_uid for entry in status.reserved_for)
    )


def claim_problem(claim: ResourceClaim | None, pod_uid: str) -> str:
    """Why a pod entry's claim does not give the pod devices ('' when it does)."""
    if claim is None:
        return "has no claim of its own"
    name = claim.metadata.name
    if claim.status is None or claim.status.allocation is None:
        return f"claim {name} is not allocated"
    if not reserved_for(claim, pod_uid):
        return f"claim {name} is not reserved for the pod"
    return ""


def devices_annotation(
    pod: Pod, claims: Iterable[tuple[PodResourceClaim, ResourceClaim | None]]
) -> str | None:
    """What the pod's devices annotation must say, from its claims (the truth): every entry's
    devices when each of the pod's own claims is allocated and reserved for it, else None
    (no annotation: the pod has no devices until all of them are allocated for it).

    The same rendering as the allocation controller's pod write, so an annotation dralloc
    wrote always agrees with this.
    """
    items = []
    for entry, claim in claims:
        if claim is None or not reserved_for(claim, pod.uid):
            return None
        assert claim.status is not None and claim.status.allocation is not None
        items.append(
            PodClaimDevices.from_allocation(
                entry.name, claim.metadata.name or "", claim.status.allocation
            )
        )
    return format_pod_devices(items) if items else None


def merged_statuses(
    current: Iterable[PodResourceClaimStatus], updates: dict[str, str | None], order: Iterable[str]
) -> tuple[PodResourceClaimStatus, ...]:
    """Claim statuses in the pod's claim order: existing entries updated, new ones added."""
    by_name = {status.name: status.resource_claim_name for status in current}
    by_name.update(updates)
    ordered = [name for name in order if name in by_name]
    extra = sorted(name for name in by_name if name not in set(ordered))
    return tuple(
        PodResourceClaimStatus(name=name, resource_claim_name=by_name[name])
        for name in [*ordered, *extra]
    )


def statuses_update(
    pod: Pod, updates: dict[str, str | None]
) -> tuple[PodResourceClaimStatus, ...] | None:
    """The pod's claim statuses with ``updates`` merged in, or None if that is what is
    recorded already (or there is nothing to record): the write both the claim controller
    and the allocation controller make, each only when it changes something."""
    statuses = merged_statuses(pod.claim_statuses, updates, (c.name for c in pod.claims))
    if not statuses or statuses == pod.claim_statuses:
        return None
    return statuses


class PodState(enum.Enum):
    """What a reservedFor entry's pod is, as far as the claim is concerned."""

    IN_USE = "in use"
    GONE = "gone"
    REPLACED = "replaced"
    DONE = "done"


def reservation_state(entry_uid: str, pod: Pod | None) -> PodState:
    if pod is None:
        return PodState.GONE
    if pod.uid != entry_uid:
        return PodState.REPLACED
    if pod.done:
        return PodState.DONE
    return PodState.IN_USE


# Owner states in which a generated claim is deleted: a pod that ended, was replaced, or is
# known deleted (which the garbage collector would act on later: the claim goes now).
_DELETABLE = (PodState.DONE, PodState.REPLACED, PodState.GONE)


@dataclasses.dataclass(frozen=True)
class ClaimPlan:
    """The writes a claim needs: the status (``reserved_for``, ``deallocate``), then the
    deletion, then the finalizer (after the deletion, so an allocated claim never lacks it)."""

    reserved_for: tuple[dict[str, Any], ...] | None = None  # new list, if it changes
    deallocate: bool = False
    remove_finalizer: bool = False
    delete: bool = False

    @property
    def nothing(self) -> bool:
        return self == ClaimPlan()


def plan_claim(
    claim: ResourceClaim,
    pod_state: Callable[[str, str], PodState],
    owner_state: PodState | None,
    protocol: PodProtocol = DRALLOC,
) -> ClaimPlan:
    """Decide trimming, deallocation, finalizer removal and deletion for one claim.

    ``pod_state(name, uid)`` classifies a reservedFor pod; ``owner_state`` is the state of
    the pod the claim was generated for (None if it was not generated).
    """
    status = claim.status
    allocated = status is not None and status.allocation is not None
    reserved = list(status.reserved_for) if status else []
    kept: list[dict[str, Any]] = []
    for entry in reserved:
        is_pod = (entry.api_group or "") == "" and entry.resource == "pods"
        if is_pod and pod_state(entry.name, entry.uid) is not PodState.IN_USE:
            continue
        kept.append(entry.to_kube())
    trimmed = len(kept) != len(reserved)
    has_finalizer = protocol.finalizer in (claim.metadata.finalizers or ())
    deleting = claim.metadata.deletion_timestamp is not None
    delete = not kept and not deleting and owner_state in _DELETABLE
    # Nobody uses it and it is on its way out (being deleted, or deleted now) with nothing
    # but our finalizer to hold it up: it keeps its allocation and reservations to the end.
    # Its devices are free once the object is gone, right after our finalizer, so clearing
    # them first would only cost the API server one more status write per pod (the costliest
    # kind). The finalizer goes after the deletion: an allocated claim never lacks it. A
    # claim that another finalizer may keep for long is deallocated first, as before.
    only_ours = all(f == protocol.finalizer for f in claim.metadata.finalizers or ())
    leaving = not kept and (deleting or delete) and only_ours
    # Only a trim or a deletion releases a claim: a finalizer on an unallocated claim is
    # otherwise there from its creation (generated claims) or the allocator's first write,
    # with the allocation about to follow.
    releasing = has_finalizer and not kept and (trimmed or deleting or delete)
    return ClaimPlan(
        reserved_for=tuple(kept) if trimmed and not leaving else None,
        deallocate=allocated and releasing and not leaving,
        remove_finalizer=releasing,
        delete=delete,
    )


def pending(
    entries: list[tuple[PodResourceClaim, ResourceClaim]],
) -> list[tuple[PodResourceClaim, ResourceClaim]]:
    """The entries whose claims are not allocated yet."""
    return [(entry, claim) for entry, claim in entries if not is_allocated(claim)]


def is_allocated(claim: ResourceClaim | None) -> bool:
    """Whether the claim has an allocation (for whomever)."""
    return claim is not None and claim.status is not None and claim.status.allocation is not None


def claim_key(claim: ResourceClaim) -> Key:
    """The claim's cache key."""
    return Key(claim.metadata.namespace or "", claim.metadata.name or "")
