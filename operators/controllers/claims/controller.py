"""The resource-claim controller's watches, queue and pod work (upstream's ``resourceclaim``
controller; docs/design.md "Upstream references").

Work is keyed ``("pod", key)`` / ``("claim", key)`` in one queue; every write carries a
resourceVersion or UID precondition. Failed requests requeue the key (the work queue's policy:
a conflict at once, an unavailable API server with backoff); only a claim the API server or
our own rules refuse to create becomes a Warning Event and the pod's DevicesAllocated=False
condition, and the pod is looked at again after a long delay, or sooner when its template or
namespace changes. A pod whose claims are refused (malformed, or more entries than the
limit) gets no claims, a Warning Event and the condition with the reason.

A pod's claim statuses are written here for a gated pod only if the allocation controller has
not recorded them with the allocation within ``STATUSES_DEFER`` seconds: one pod write instead
of two.
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from operators import metrics
from operators.api.deviceclass import DeviceClass
from operators.api.extendedresources import ENTRY_NAME, IMPLICIT_PREFIX
from operators.api.models import ResourceClaim, ResourceClaimTemplate
from operators.cache.core import DEVICES_ANNOTATION, POD_CLAIMS_INDEX, Namespace, Pod
from operators.cache.informer import Change, Key
from operators.controllers import claimrules, podcondition
from operators.controllers.claims.boundpods import BoundPods
from operators.controllers.claims.making import ClaimError, ClaimMaker
from operators.controllers.claims.release import ClaimReleaser
from operators.controllers.claims.unserved import UnservedExtended
from operators.controllers.runtime import Runtime, register_controller
from operators.controllers.workqueue import WorkQueue, run_workers
from operators.kube import (
    DEVICE_CLASSES,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
)

log = structlog.get_logger(__name__)

WorkKey = tuple[str, Key]


def _namespace_of(work: WorkKey) -> str:
    return work[1].namespace


REASON_FAILED_CREATION = "FailedResourceClaimCreation"
REASON_INVALID_CLAIMS = "InvalidClaims"  # the pod's DevicesAllocated=False condition
REFUSED_RETRY_DELAY = (
    300.0  # a refused claim is retried this late (template/namespace events: at once)
)
EXTENDED_RESOURCES_INDEX = "extended-resource-names"
STATUSES_DEFER = 5.0  # seconds a gated pod's claim statuses are left to the allocation write


class ClaimController:
    name = "claims"

    def __init__(self, runtime: Runtime, *, workers: int = 32) -> None:
        self.runtime = runtime
        self.client = runtime.client
        self.protocol = runtime.protocol
        cache = runtime.cache
        self.pods = cache[PODS]
        self.templates = cache[RESOURCE_CLAIM_TEMPLATES]
        self.namespaces = cache[NAMESPACES]
        self.claims = cache.assumed(RESOURCE_CLAIMS)
        self.translates = runtime.settings.translates_extended_resources
        self.workers = workers
        self.queue: WorkQueue[WorkKey] = WorkQueue(
            base_delay=runtime.settings.requeue_base_delay,
            max_delay=runtime.settings.requeue_max_delay,
            rejected_delay=REFUSED_RETRY_DELAY,
            share=_namespace_of,  # namespaces take turns (see the allocation controller)
        )
        # Gated pods whose claim statuses we left to the allocation controller, since when.
        self.statuses_deferred: dict[Key, float] = {}
        # The allocation controller records a gated pod's statuses just before it lifts the
        # gate: in its one pod write on our CRDs, in a status write of its own in-tree.
        # Writing them here as well made that write conflict (its pod was the version
        # before ours), a wasted request and a second sync for every pod.
        self.allocation_records_statuses = runtime.settings.allocation_controller
        self.synced = 0
        self.pods.ensure_index(claimrules.PODS_BY_UID_INDEX, claimrules.pod_uid_keys)
        self.pods.ensure_index(POD_CLAIMS_INDEX, Pod.claim_keys)
        self.pods.add_index("claims-by-template", _pod_template_keys)
        self.pods.add_index(EXTENDED_RESOURCES_INDEX, _extended_resource_names)
        self.claims.ensure_index(claimrules.CLAIMS_BY_OWNER_INDEX, claimrules.owner_uid_keys)
        self.pods.add_handler(self._on_pod)
        self.claims.informer.add_handler(self._on_claim)
        self.templates.add_handler(self._on_template)
        self.namespaces.add_handler(self._on_namespace)
        self.classes = cache[DEVICE_CLASSES]
        self.classes.add_handler(self._on_class)
        # Its parts, one job each.
        self.maker = ClaimMaker(runtime, self.claims, self.templates, self.namespaces)
        self.unserved = UnservedExtended(runtime, self.namespaces, self.classes)
        self.bound = BoundPods(runtime, self.claims)
        self.releaser = ClaimReleaser(runtime, self.pods, self.claims)
        metrics.register_claims_gauge(self._gauge_labels)

    # --- event handlers: decide what to enqueue --------------------------------------------

    def _on_pod(self, change: Change[Pod]) -> None:
        pod = change.new or change.old
        if pod is None:
            return
        if change.new is None or pod.done or pod.deleting:
            # The claims made for it go with it, also those of a pod that names none:
            # kube-scheduler's claims for its DRA extended resources.
            owned = self.claims.by_index(claimrules.CLAIMS_BY_OWNER_INDEX, pod.uid)
            if change.new is None and (owned or pod.uses_claims):
                self._forget_deleted(change.key, pod)
            for claim in owned:
                self.queue.add(("claim", Key(pod.namespace, claim.metadata.name or "")))
        if change.new is not None and self.unserved.of(pod):
            self.queue.add(("pod", change.key))
            return
        # A devices annotation on a pod that asks for no claims is a forgery to correct.
        if not (pod.uses_claims or DEVICES_ANNOTATION in pod.annotations):
            return
        if change.new is None or pod.done or pod.deleting:
            for name in pod.claim_names():
                self.queue.add(("claim", Key(pod.namespace, name)))
            return
        if (
            _needs_claims(pod)
            or pod.node_name
            or pod.claims_error
            or pod.extended_error
            or self._extended_claim_wanting(pod)
        ):
            self.queue.add(("pod", change.key))

    def _extended_claim_wanting(self, pod: Pod) -> bool:
        """Whether the claim of the pod's extended resources is missing, or not its own."""
        if pod.extended is None:
            return False
        claim = self.claims.get(Key(pod.namespace, pod.extended.claim_name))
        return claim is None or claimrules.owner_pod_uid(claim) != pod.uid

    def _forget_deleted(self, key: Key, pod: Pod) -> None:
        """A deleted pod: its deferred statuses go, and its UID is remembered as gone (the
        claims it reserved or owned are released without a live read)."""
        self.statuses_deferred.pop(key, None)
        self.releaser.pod_deleted(pod.uid)

    def _on_claim(self, change: Change[ResourceClaim]) -> None:
        self.queue.add(("claim", change.key))
        for pod in self.pods.by_index(POD_CLAIMS_INDEX, (change.key.namespace, change.key.name)):
            if pod.node_name and not pod.done:
                self.queue.add(("pod", Key(pod.namespace, pod.name)))
        claim = change.new or change.old
        if claim is not None:
            owner = claimrules.owner_pod_uid(claim)
            for pod in self.pods.by_index(claimrules.PODS_BY_UID_INDEX, owner) if owner else ():
                # Bound owners keep their devices annotation in step with their claims.
                if change.new is None or (pod.node_name and not pod.done):
                    self.queue.add(("pod", Key(pod.namespace, pod.name)))

    def _on_class(self, change: Change[DeviceClass]) -> None:
        """Extended resource names may map elsewhere now: pods asking for one that a class
        now backs are looked at again (they came before it, past the webhook's translation)."""
        self.unserved.classes_changed()
        if not self.translates:
            return
        names: set[str] = set()
        for device_class in (change.old, change.new):
            if device_class is not None:
                names.add(IMPLICIT_PREFIX + (device_class.metadata.name or ""))
                if device_class.spec.extended_resource_name:
                    names.add(device_class.spec.extended_resource_name)
        for name in names:
            for pod in self.pods.by_index(EXTENDED_RESOURCES_INDEX, name):
                if self.unserved.of(pod):
                    self.queue.add(("pod", Key(pod.namespace, pod.name)))

    def _on_template(self, change: Change[ResourceClaimTemplate]) -> None:
        for pod in self.pods.by_index(
            "claims-by-template", (change.key.namespace, change.key.name)
        ):
            self.queue.add(("pod", Key(pod.namespace, pod.name)))

    def _on_namespace(self, change: Change[Namespace]) -> None:
        """A namespace label (admin access) may unblock claim creation for its pods."""
        if change.old is None or change.new is None or change.old.labels == change.new.labels:
            return
        for key, pod in self.pods.items():
            if key.namespace == change.key.name and _needs_claims(pod):
                self.queue.add(("pod", key))

    def _gauge_labels(self) -> list[tuple[str, str, str]]:
        labels = []
        for claim in self.claims.informer.values():
            allocated = claim.status is not None and claim.status.allocation is not None
            admin = claimrules.requests_admin_access(claim.spec)
            generated = claimrules.pod_claim_name_of(claim, self.protocol)
            source = "resource_claim_template" if generated else ""
            labels.append((str(allocated).lower(), str(admin).lower(), source))
        return labels

    # --- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        # Everything once more: after a lost and regained Lease, work that was cancelled
        # half-way (or that another replica left) is picked up from the cache.
        for key, pod in self.pods.items():
            self._on_pod(Change(PODS, key, None, pod))
        for key, _ in self.claims.informer.items():
            self.queue.add(("claim", key))
        await run_workers(self.queue, self.sync, workers=self.workers, name=self.name)

    def health(self) -> dict[str, Any]:
        return {"queued": self.queue.pending(), "synced": self.synced}

    async def sync(self, work: WorkKey) -> None:
        """One pod or claim; a failed request raises, and the work queue requeues the key."""
        kind, key = work
        if kind == "pod":
            await self.sync_pod(key)
        else:
            again = await self.releaser.sync(key)
            if again is not None:
                self.queue.add_after(work, again)
        self.synced += 1
        self.queue.forget(work)

    # --- pods ------------------------------------------------------------------------------

    async def sync_pod(self, key: Key) -> None:
        pod = self.pods.get(key)
        if pod is None or pod.deleting or pod.done:
            return
        unserved = self.unserved.of(pod)
        if unserved:
            again = await self.unserved.report(pod, unserved)
            if again is not None:
                self.queue.add_after(("pod", key), again)
            return
        problem = pod.claims_error or pod.extended_error
        if problem:  # malformed, or over the limit of entries: no claims at all
            await self.runtime.events.post(
                pod.involved(), REASON_FAILED_CREATION, problem, warning=True
            )
            await podcondition.set_condition(
                self.client,
                pod,
                "False",
                REASON_INVALID_CLAIMS,
                problem,
                still_needed=lambda fresh: bool(fresh.claims_error or fresh.extended_error),
                protocol=self.protocol,
            )
            if pod.node_name:
                await self.bound.correct_devices_annotation(pod, pod.resource_version)
            return
        updates: dict[str, str | None] = {}
        refused = ""  # why a claim could not be made, told on the pod's condition below
        for pod_claim in pod.claims:
            if pod_claim.resource_claim_template_name is None:
                continue
            try:
                updates[pod_claim.name] = await self.maker.for_template(
                    pod, pod_claim.name, pod_claim.resource_claim_template_name
                )
            except ClaimError as error:
                refused = f"PodResourceClaim {pod_claim.name}: {error}"
                await self.runtime.events.post(
                    pod.involved(), REASON_FAILED_CREATION, refused, warning=True
                )
                log.info("claim not created", pod=pod.ref, claim=pod_claim.name, error=str(error))
                break
        if pod.extended is not None and not refused:
            try:
                await self.maker.for_extended(pod, pod.extended)
            except ClaimError as error:
                refused = f"PodResourceClaim {ENTRY_NAME} ({pod.extended.describe()}): {error}"
                await self.runtime.events.post(
                    pod.involved(), REASON_FAILED_CREATION, refused, warning=True
                )
                log.info("claim not created", pod=pod.ref, claim=ENTRY_NAME, error=str(error))
        statuses = claimrules.statuses_update(pod, updates)
        version = pod.resource_version
        if statuses is not None:
            if not refused and self._leave_statuses_to_allocation(key, pod):
                return
            patch, subresource = self.protocol.statuses_write(statuses)
            updated = await self.client.merge_update(
                PODS,
                pod.name,
                patch,
                base=self.pods.raw(key),
                namespace=pod.namespace,
                resource_version=version,
                subresource=subresource,
            )
            version = updated["metadata"]["resourceVersion"]
        self.statuses_deferred.pop(key, None)
        if pod.node_name:
            await self.bound.reserve(pod)
            await self.bound.correct_devices_annotation(pod, version)
        if refused:
            # On the pod's condition too, where the user looks: the allocation waits for the
            # claim without a word (seen in the robustness suite: an in-tree pod whose
            # recorded claim was deleted stayed pending with an Event only).
            await podcondition.set_condition(
                self.client,
                pod,
                "False",
                REASON_FAILED_CREATION,
                refused,
                still_needed=podcondition.no_devices,
                protocol=self.protocol,
                resource_version=version,
            )
            # The user may fix it without an event we watch (an RBAC rule, a quota).
            self.queue.add_after(("pod", key), REFUSED_RETRY_DELAY)

    def _leave_statuses_to_allocation(self, key: Key, pod: Pod) -> bool:
        """Whether to let the allocation controller record the claim statuses, for a while.

        A gated pod is about to be patched by the allocation controller anyway (devices,
        node, gate); it records the statuses in that same write, which saves every such pod
        a write and the watch events it fans out to every pod watcher. If the pod is still
        unrecorded after :data:`STATUSES_DEFER` (no node fits, say), we write them ourselves.
        """
        if not (self.allocation_records_statuses and pod.gated):
            return False
        now = time.monotonic()
        waited = now - self.statuses_deferred.setdefault(key, now)
        if waited >= STATUSES_DEFER:
            return False
        self.queue.add_after(("pod", key), STATUSES_DEFER - waited)
        return True


def _needs_claims(pod: Pod) -> bool:
    recorded = {status.name for status in pod.claim_statuses}
    return any(
        c.resource_claim_template_name is not None and c.name not in recorded for c in pod.claims
    )


def _extended_resource_names(pod: Pod) -> list[str]:
    """The pod's requests that a DeviceClass may back (a name with a domain)."""
    return [name for name in pod.needs.requests if "/" in name]


def _pod_template_keys(pod: Pod) -> list[tuple[str, str]]:
    return [
        (pod.namespace, c.resource_claim_template_name)
        for c in pod.claims
        if c.resource_claim_template_name is not None
    ]


register_controller(
    ClaimController.name,
    lambda runtime: ClaimController(runtime) if runtime.settings.claims_controller else None,
)
