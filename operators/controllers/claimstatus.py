"""The ``Allocated`` condition on claims: what each waiting claim is told, and when to write.

A pod's explanation covers all its claims at once; a claim's condition says what stops *that
claim*: on each node, the first of its requests that does not fit (or why the node was not
considered at all). A condition is rewritten only when its status, reason or message
changes, so a claim that keeps waiting for the same reason costs no writes. Pure functions,
no I/O.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from operators.allocator.funnel import Explanation
from operators.api.meta import Condition
from operators.api.models import ResourceClaim
from operators.api.podprotocol import PodProtocol
from operators.cache.assume import AssumeCache
from operators.controllers import conditions, placerules
from operators.kube import RESOURCE_CLAIMS, JsonDict, KubeClient

CONDITION_TYPE = "Allocated"
REASON_ALLOCATED = "Allocated"
REASON_UNSCHEDULABLE = "Unschedulable"
"""No node has what the claim needs now; it may fit later."""
REASON_FAILED = "AllocationFailed"
"""The claim itself cannot be allocated as written (bad CEL, missing class, refused)."""
OTHER_CLAIMS = "fits this claim, not the pod's other claims"
MAX_MESSAGE = 1024  # the API allows 32 KiB; a condition is for reading at a glance


ALLOCATED_DEVICES = "allocatedDevices"


def allocated_devices(allocation: JsonDict) -> str:
    """``status.allocatedDevices`` for an allocation: its devices' names, in the results'
    order, each once (shares of one device are one name), comma-separated."""
    results = (allocation.get("devices") or {}).get("results") or ()
    names = dict.fromkeys(str(r.get("device") or "") for r in results)
    return ",".join(name for name in names if name)


RESERVED_FOR_NAMES = "reservedForNames"


def reserved_for_names(reserved: Iterable[Mapping[str, Any]]) -> str | None:
    """``status.reservedForNames`` for a reservedFor list: its names, in order, comma-separated
    (None for an empty list: the field goes with the last consumer)."""
    return ",".join(str(entry.get("name") or "") for entry in reserved) or None


def summarized(status: JsonDict, protocol: PodProtocol) -> JsonDict:
    """A claim status patch with dralloc's summaries of the lists it writes, where claims have
    them: ``allocatedDevices`` follows ``allocation``, ``reservedForNames`` follows
    ``reservedFor`` (the CRD refuses a summary that does not match its list, so every status
    write that touches either list goes through here)."""
    if not protocol.status_summaries:
        return status
    out = dict(status)
    if "allocation" in status:
        allocation = status["allocation"]
        # No devices (a claim without requests): no summary. "" would read as one device
        # named "" to the CRD's rule, which refuses it.
        out[ALLOCATED_DEVICES] = (allocated_devices(allocation) or None) if allocation else None
    if "reservedFor" in status:
        out[RESERVED_FOR_NAMES] = reserved_for_names(status["reservedFor"] or ())
    return out


def deallocation(protocol: PodProtocol) -> JsonDict:
    """The status fields a deallocation clears (merge-patch nulls): the allocation, what
    drivers reported about its devices, and dralloc's list of them where claims have it."""
    cleared: JsonDict = {"allocation": None, "devices": None}
    if protocol.status_summaries:
        cleared[ALLOCATED_DEVICES] = None
    return cleared


def claim_messages(
    explanation: Explanation,
    claim_refs: Sequence[str],
    rejections: Iterable[str],
    nodes_total: int,
) -> dict[str, str]:
    """Per claim (``namespace/name``): the aggregated reason its requests do not fit.

    ``rejections`` are the nodes left out before the allocator looked (affinity, taints);
    they count against every claim alike.
    """
    skipped = list(rejections)
    messages = {}
    for ref in claim_refs:
        reasons = list(skipped)
        for node in explanation.reasons:
            if node.error:
                reasons.append(node.summary)
                continue
            blocking = [f for f in node.requests if f.claim == ref and f.blocking_stage()]
            if blocking:
                reasons.append(blocking[0].summary())
            elif len(claim_refs) > 1 and any(f.blocking_stage() for f in node.requests):
                reasons.append(OTHER_CLAIMS)
            else:
                reasons.append(node.summary)
        messages[ref] = placerules.summarize(nodes_total, reasons)[:MAX_MESSAGE]
    return messages


def updated_conditions(
    claim: ResourceClaim,
    status: str,
    reason: str,
    message: str,
    now: datetime.datetime,
) -> list[dict[str, Any]] | None:
    """The claim's conditions with ours set; None if ours already says exactly this."""
    return conditions.set_condition(
        _conditions_of(claim),
        CONDITION_TYPE,
        status,
        reason,
        message[:MAX_MESSAGE],
        now=now,
        observed_generation=claim.metadata.generation,
    )


def without_condition(claim: ResourceClaim) -> list[dict[str, Any]] | None:
    """The claim's conditions without ours (deallocated: nothing to say); None if absent."""
    return conditions.remove_condition(_conditions_of(claim), CONDITION_TYPE)


def _conditions_of(claim: ResourceClaim) -> tuple[Condition, ...]:
    return claim.status.conditions if claim.status is not None else ()


async def patch_status(
    client: KubeClient,
    claims: AssumeCache[ResourceClaim],
    name: str,
    namespace: str | None,
    resource_version: str | None,
    status: Any,
) -> JsonDict:
    """A merge patch of a claim's status at ``resource_version``; the answer goes into the
    assume cache at once (so the next decision sees it before the watch does)."""
    updated = await client.merge_patch(
        RESOURCE_CLAIMS,
        name,
        {"status": status},
        namespace=namespace,
        resource_version=resource_version,
        subresource="status",
    )
    claims.assume(updated)
    return updated


async def release_claim(
    client: KubeClient,
    claims: AssumeCache[ResourceClaim],
    protocol: PodProtocol,
    claim: ResourceClaim,
    uid: str,
) -> None:
    """The pod ``uid`` leaves the claim's reservedFor; a claim nobody else uses is
    deallocated (conditional on the claim's resourceVersion)."""
    assert claim.status is not None
    kept = [r.to_kube() for r in claim.status.reserved_for if r.uid != uid]
    status: dict[str, Any] = {"reservedFor": kept or None}
    if not kept:
        status |= deallocation(protocol)
        remaining = without_condition(claim)
        if remaining is not None:
            status["conditions"] = remaining or None
    await patch_status(
        client,
        claims,
        claim.metadata.name or "",
        claim.metadata.namespace,
        claim.metadata.resource_version,
        summarized(status, protocol),
    )


def involved(claim: ResourceClaim) -> JsonDict:
    """The minimal object an Event needs to point at a claim."""
    return conditions.event_target(claim)
