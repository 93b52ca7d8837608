"""Pods bound to a node: their own allocated claims reserved for them, and their devices
annotation in step with those claims.

A pod bound by someone else (kube-scheduler, a user's ``nodeName``) gets its reservations as
upstream gives them. The workload reads its devices from the annotation, but the claims
(allocation and a reservation for the pod's UID) are what was really allocated: an annotation
that disagrees, written by someone else or stale, is rewritten from the claims, or removed when
they are not all allocated for the pod, with a Warning Event.
"""

from __future__ import annotations

import structlog

from operators.api.models import ResourceClaim
from operators.cache.assume import AssumeCache
from operators.cache.core import DEVICES_ANNOTATION, Pod, PodResourceClaim
from operators.cache.informer import Key
from operators.controllers import claimrules, claimstatus
from operators.controllers.runtime import Runtime
from operators.kube import PODS

log = structlog.get_logger(__name__)

REASON_DEVICES_CORRECTED = claimrules.REASON_DEVICES_CORRECTED


class BoundPods:
    def __init__(self, runtime: Runtime, claims: AssumeCache[ResourceClaim]) -> None:
        self.runtime = runtime
        self.client = runtime.client
        self.protocol = runtime.protocol
        self.claims = claims

    def _own_claim(self, pod: Pod, entry: PodResourceClaim) -> ResourceClaim | None:
        """The claim of one pod entry, if it is the pod's own (see claimrules.own_claim)."""
        return claimrules.own_claim(
            pod,
            entry,
            lambda name: self.claims.get(Key(pod.namespace, name)),
            self.claims.by_index(claimrules.CLAIMS_BY_OWNER_INDEX, pod.uid),
            self.protocol,
        )

    async def reserve(self, pod: Pod) -> None:
        """Reserve the pod's allocated claims for it, as upstream does for a bound pod.

        Only the pod's own claims: one it names, in its namespace, or one generated for it. A
        generated claim of another pod, recorded in this pod's claim statuses by whoever could
        write them, is never reserved for this pod.
        """
        for entry in pod.claims:
            claim = self._own_claim(pod, entry)
            if claim is None or claim.status is None or claim.status.allocation is None:
                continue
            if any(reserved.uid == pod.uid for reserved in claim.status.reserved_for):
                continue
            reserved = [reserved.to_kube() for reserved in claim.status.reserved_for]
            reserved.append({"resource": "pods", "name": pod.name, "uid": pod.uid})
            await claimstatus.patch_status(
                self.client,
                self.claims,
                claim.metadata.name or "",
                pod.namespace,
                claim.metadata.resource_version,
                claimstatus.summarized({"reservedFor": reserved}, self.protocol),
            )

    async def correct_devices_annotation(self, pod: Pod, version: str) -> None:
        """The pod's devices annotation says what its claims say, or nothing.

        An annotation that is merely missing is written without an Event (the allocation
        controller's pod write may not have happened yet, or the pod was bound by someone
        else); one that disagrees is corrected with a Warning Event.
        """
        claims = [(entry, self._own_claim(pod, entry)) for entry in pod.claims]
        expected = claimrules.devices_annotation(pod, claims)
        current = pod.annotations.get(DEVICES_ANNOTATION)
        if current == expected:
            return
        await self.client.merge_patch(
            PODS,
            pod.name,
            {"metadata": {"annotations": {DEVICES_ANNOTATION: expected}}},
            namespace=pod.namespace,
            resource_version=version,
        )
        if current is None:
            return
        if expected is not None:
            message = (
                f"annotation {DEVICES_ANNOTATION} did not match the pod's ResourceClaims; "
                "rewritten from them"
            )
        else:
            problems = [
                f"claim entry {entry.name}: {claimrules.claim_problem(claim, pod.uid)}"
                for entry, claim in claims
                if claimrules.claim_problem(claim, pod.uid)
            ]
            message = (
                f"annotation {DEVICES_ANNOTATION} removed: the pod's ResourceClaims are not "
                f"allocated for it ({'; '.join(problems)})"
            )
        log.warning("devices annotation corrected", pod=pod.ref, removed=expected is None)
        await self.runtime.events.post(
            pod.involved(), REASON_DEVICES_CORRECTED, message, warning=True
        )
