"""Claims nobody uses any more: reservations of pods that are gone, replaced or done are
trimmed, a claim left unreserved is deallocated (allocation cleared, then our finalizer
dropped), and a generated claim of a done pod is deleted (then the finalizer dropped: a claim on
its way out keeps its allocation until it is gone, see ``claimrules.plan_claim``).

A generated claim whose pod was deleted is the garbage collector's to delete (the pod owns
it): deleting it too would race the collector, whose deletion is conditional on the version it
saw and so is refused, read again and sent again (about two more requests per pod to the API
server, measured on level 2). The claim waits :data:`GC_GRACE` for that deletion, then our
finalizer goes; where the collector does not come (a control plane without it, or far behind),
the claim is deleted here once the grace is over.

Whether a reserving pod is gone is read from the cache, from the deletions this process saw,
and for a pod the cache does not hold, from a live read: the cache may lag behind the claim.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import structlog

from operators.api.models import ResourceClaim
from operators.cache.assume import AssumeCache
from operators.cache.core import Pod, parse_pod
from operators.cache.informer import Informer, Key
from operators.controllers import claimrules, claimstatus
from operators.controllers.claimrules import PodState
from operators.controllers.runtime import Runtime
from operators.kube import PODS, RESOURCE_CLAIMS, NotFound

log = structlog.get_logger(__name__)

DELETED_MEMORY = 10_000
"""How many deleted pods' UIDs are remembered (their claims are released without a live read,
and those they own wait for the garbage collector): a burst of deletions larger than this
within :data:`GC_GRACE` sends the oldest claims through a live read and a deallocation."""
GC_GRACE = 5.0
"""Seconds a generated claim of a deleted pod waits for the garbage collector to delete it
before the controller does (the collector usually takes milliseconds)."""


class ClaimReleaser:
    def __init__(
        self, runtime: Runtime, pods: Informer[Pod], claims: AssumeCache[ResourceClaim]
    ) -> None:
        self.client = runtime.client
        self.protocol = runtime.protocol
        self.pods = pods
        self.claims = claims
        self.deleted_pod_uids: collections.OrderedDict[str, float] = collections.OrderedDict()
        """Deleted pods' UIDs, with when (monotonic) the deletion was seen."""
        self.gc_grace = GC_GRACE

    def pod_deleted(self, uid: str) -> None:
        """Remember a deleted pod's UID: the claims it reserved or owned are released without
        a live read."""
        self.deleted_pod_uids.setdefault(uid, time.monotonic())
        while len(self.deleted_pod_uids) > DELETED_MEMORY:
            self.deleted_pod_uids.popitem(last=False)

    async def sync(self, key: Key) -> float | None:
        """Release the claim as far as it can be now; returns in how many seconds to look at
        it again (it waits for the garbage collector), or None."""
        claim = self.claims.get(key)
        if claim is None:
            return None
        states: dict[str, PodState] = {}
        for entry in claim.status.reserved_for if claim.status else ():
            if (entry.api_group or "") == "" and entry.resource == "pods":
                states[entry.uid] = await self._pod_state(key.namespace, entry.name, entry.uid)
        owner_uid = claimrules.owner_pod_uid(claim)
        owner_state = None
        if owner_uid is not None:
            owner_state = self._cached_owner_state(owner_uid)
        plan = claimrules.plan_claim(
            claim, lambda _name, uid: states[uid], owner_state, self.protocol
        )
        if plan.nothing:
            return None
        seen_gone = self.deleted_pod_uids.get(owner_uid or "")
        if plan.delete and owner_state is PodState.GONE and seen_gone is not None:
            waited = time.monotonic() - seen_gone
            if waited < self.gc_grace:
                return self.gc_grace - waited  # the collector's to delete; ours if it does not
        version = claim.metadata.resource_version
        if plan.reserved_for is not None or plan.deallocate:
            status: dict[str, Any] = {"reservedFor": list(plan.reserved_for or ()) or None}
            if plan.deallocate:
                # Driver-reported device status describes the allocation; it must not
                # outlive it (the API's rule: status.devices refer to allocated devices).
                status |= claimstatus.deallocation(self.protocol)
                remaining = claimstatus.without_condition(claim)
                if remaining is not None:
                    status["conditions"] = remaining or None  # "Allocated" no longer holds
            status = claimstatus.summarized(status, self.protocol)
            updated = await self.client.merge_patch(
                RESOURCE_CLAIMS,
                key.name,
                {"status": status},
                namespace=key.namespace,
                resource_version=version,
                subresource="status",
            )
            version = updated["metadata"]["resourceVersion"]
            self.claims.assume(updated)
            log.info(
                "claim released" if plan.deallocate else "reservations trimmed",
                claim=str(key),
                kept=len(plan.reserved_for or ()),
            )
        finalizers = list(claim.metadata.finalizers or ())
        if plan.delete:
            deleted = await self.client.delete(
                RESOURCE_CLAIMS, key.name, namespace=key.namespace, uid=claim.metadata.uid
            )
            log.info("generated claim deleted", claim=str(key), pod_state=str(owner_state))
            meta = deleted.get("metadata") or {}
            if deleted.get("kind") == "Status" or not meta.get("deletionTimestamp"):
                self.claims.assume_gone(
                    key, claim.metadata.uid or "", str(meta.get("resourceVersion") or "")
                )
                return None  # gone at once: no finalizer held it
            self.claims.assume(deleted)
            version = str(meta.get("resourceVersion") or version)
            finalizers = list(meta.get("finalizers") or ())
        if plan.remove_finalizer and self.protocol.finalizer in finalizers:
            await self._drop_finalizer(key, claim, finalizers, version)
        return None

    async def _drop_finalizer(
        self, key: Key, claim: ResourceClaim, finalizers: list[str], version: str | None
    ) -> None:
        kept = [f for f in finalizers if f != self.protocol.finalizer]
        try:
            updated = await self.client.merge_patch(
                RESOURCE_CLAIMS,
                key.name,
                {"metadata": {"finalizers": kept or None}},
                namespace=key.namespace,
                resource_version=version,
            )
        except NotFound as error:
            if error.name == key.name:
                # Deleted meanwhile: nothing holds it any more. A 404 that does not name the
                # claim (the route, not the object) hides nothing: the next event tries again.
                self.claims.assume_gone(key, claim.metadata.uid or "")
            return
        # Without finalizers left, the answer means it is gone: the cache hides it (the watch
        # still shows it held for a moment, and a sync then would patch it again).
        self.claims.assume(updated)

    async def _pod_state(self, namespace: str, name: str, uid: str) -> PodState:
        """Classify a reserving pod; a live GET covers an informer that lags behind."""
        pod = self.pods.get(Key(namespace, name))
        if pod is None:
            if uid in self.deleted_pod_uids:
                return PodState.GONE
            try:
                pod = parse_pod(await self.client.get(PODS, name, namespace), self.protocol)
            except NotFound:
                return PodState.GONE
        return claimrules.reservation_state(uid, pod)

    def _cached_owner_state(self, owner_uid: str) -> PodState | None:
        """Done, replaced or deleted owners make a generated claim deletable. A deleted one
        is known by its deletion in our watch: then the claim goes now, with its allocation,
        rather than deallocated first and deleted by the garbage collector later."""
        for pod in self.pods.by_index(claimrules.PODS_BY_UID_INDEX, owner_uid):
            return PodState.DONE if pod.done else PodState.IN_USE
        if owner_uid in self.deleted_pod_uids:
            return PodState.GONE
        return None
