"""The resource-claim controller (upstream's ``resourceclaim`` controller;
docs/design.md "Upstream references").

For pods with the claims annotation it creates claims from templates (owned by the pod) and
records them in the pod's claim-statuses annotation (for a gated pod, only if the allocation
controller has not recorded them with the allocation within ``STATUSES_DEFER`` seconds: one
pod write instead of two); for a pod that is bound to a node it reserves the pod's own
allocated claims and keeps the devices annotation in step with them (claims are the truth:
an annotation that disagrees is rewritten from them, or removed, with a Warning Event); for
claims it trims ``reservedFor``
entries of pods that are gone, replaced or done, deallocates claims nobody uses any more
(allocation cleared, then our finalizer dropped), and deletes generated claims of done pods
(deleted, then our finalizer dropped: a claim on its way out keeps its allocation until it is
gone, see ``claimrules.plan_claim``).

Work is keyed ``("pod", key)`` / ``("claim", key)`` in one queue; every write carries a
resourceVersion or UID precondition. Failed requests requeue the key (the work queue's policy:
a conflict at once, an unavailable API server with backoff); only a claim the API server or
our own rules refuse to create becomes a Warning Event on the pod, and the pod is looked at
again after a long delay, or sooner when its template or namespace changes. A pod whose claims
annotation is refused (malformed, or more entries than the limit) gets no claims, a Warning
Event and the pod's DevicesAllocated=False condition with the reason.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import time
from typing import Any

import structlog

from operators import metrics
from operators.api.deviceclass import DeviceClass
from operators.api.extendedresources import (
    ENTRY_NAME,
    IMPLICIT_PREFIX,
    ExtendedClaim,
    served_mapping,
)
from operators.api.models import ResourceClaim, ResourceClaimTemplate
from operators.cache.core import (
    DEVICES_ANNOTATION,
    POD_CLAIMS_INDEX,
    Namespace,
    Pod,
    PodResourceClaim,
    parse_pod,
)
from operators.cache.informer import Change, Key
from operators.controllers import claimrules, claimstatus, podcondition
from operators.controllers.claimrules import PodState
from operators.controllers.runtime import Runtime, register_controller
from operators.controllers.workqueue import WorkQueue, run_workers
from operators.kube import (
    DEVICE_CLASSES,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    ApiError,
    FailureKind,
    NotFound,
    failure_kind,
)

log = structlog.get_logger(__name__)

WorkKey = tuple[str, Key]


def _namespace_of(work: WorkKey) -> str:
    return work[1].namespace


REASON_FAILED_CREATION = "FailedResourceClaimCreation"
REASON_INVALID_CLAIMS = "InvalidClaims"  # the pod's DevicesAllocated=False condition
REASON_EXTENDED_NOT_SERVED = "ExtendedResourcesNotServed"  # event, and condition of a bare pod
REASON_DEVICES_CORRECTED = claimrules.REASON_DEVICES_CORRECTED
REFUSED_RETRY_DELAY = (
    300.0  # a refused claim is retried this late (template/namespace events: at once)
)
RECREATE_MEMORY = 600.0  # s: one untranslated pod per controller is deleted to be made again
RECREATED_OWNERS = ("ReplicaSet", "StatefulSet")  # make a deleted pod again, no harm done
EXTENDED_RESOURCES_INDEX = "extended-resource-names"
STATUSES_DEFER = 5.0  # seconds a gated pod's claim statuses are left to the allocation write


class ClaimError(Exception):
    """A problem with one pod claim the user must fix; becomes a Warning Event on the pod."""


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
        self.gates = runtime.settings.feature_gates
        self.translates = runtime.settings.translates_extended_resources
        self.workers = workers
        self.queue: WorkQueue[WorkKey] = WorkQueue(
            base_delay=runtime.settings.requeue_base_delay,
            max_delay=runtime.settings.requeue_max_delay,
            rejected_delay=REFUSED_RETRY_DELAY,
            share=_namespace_of,  # namespaces take turns (see the allocation controller)
        )
        self.deleted_pod_uids: collections.OrderedDict[str, None] = collections.OrderedDict()
        # Controllers whose untranslated pod was deleted to be made again: when (the API
        # server's timestamp format, to compare with creationTimestamp; and monotonic).
        self.recreated_for: dict[tuple[str, str], tuple[str, float]] = {}
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
        self._mapping: dict[str, str] | None = None
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
        if change.new is not None and self._unserved_extended(pod):
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
        self.deleted_pod_uids[pod.uid] = None
        while len(self.deleted_pod_uids) > 500:
            self.deleted_pod_uids.popitem(last=False)

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
        self._mapping = None
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
                if self._unserved_extended(pod):
                    self.queue.add(("pod", Key(pod.namespace, pod.name)))

    def _class_mapping(self) -> dict[str, str]:
        """Extended resource name -> class, for the classes dralloc serves them for."""
        if self._mapping is None:
            scheduler_classes = self.runtime.settings.scheduler_classes
            self._mapping = served_mapping(self.classes.values(), scheduler_classes)
        return self._mapping

    def _unserved_extended(self, pod: Pod) -> list[str]:
        """A pod in a served namespace that asks for DRA extended resources nobody turned
        into a claim (see claimrules.unserved_extended_resources)."""
        if not self.translates or not any("/" in name for name in pod.needs.requests):
            return []
        namespace: Namespace | None = self.namespaces.get(Key("", pod.namespace))
        if not self.runtime.settings.serves_namespace(
            pod.namespace, namespace.labels if namespace else None
        ):
            return []
        return claimrules.unserved_extended_resources(pod, self._class_mapping())

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
            await self.sync_claim(key)
        self.synced += 1
        self.queue.forget(work)

    # --- pods ------------------------------------------------------------------------------

    async def sync_pod(self, key: Key) -> None:
        pod = self.pods.get(key)
        if pod is None or pod.deleting or pod.done:
            return
        unserved = self._unserved_extended(pod)
        if unserved:
            await self._report_unserved_extended(pod, unserved)
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
                await self._correct_devices_annotation(pod, pod.resource_version)
            return
        updates: dict[str, str | None] = {}
        refused = ""  # why a claim could not be made, told on the pod's condition below
        for pod_claim in pod.claims:
            if pod_claim.resource_claim_template_name is None:
                continue
            try:
                updates[pod_claim.name] = await self._ensure_claim(
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
                await self._ensure_extended_claim(pod, pod.extended)
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
            updated = await self.client.merge_patch(
                PODS,
                pod.name,
                patch,
                namespace=pod.namespace,
                resource_version=version,
                subresource=subresource,
            )
            version = updated["metadata"]["resourceVersion"]
        self.statuses_deferred.pop(key, None)
        if pod.node_name:
            await self._reserve_for_bound_pod(pod)
            await self._correct_devices_annotation(pod, version)
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

    async def _ensure_claim(self, pod: Pod, pod_claim_name: str, template_name: str) -> str:
        """The name of this pod's claim for a template entry, creating it if needed."""
        recorded = pod.claim_name(_entry(pod, pod_claim_name))
        if recorded:
            claim = self.claims.get(Key(pod.namespace, recorded))
            if claim is not None:
                if claimrules.owner_pod_uid(claim) != pod.uid:
                    raise ClaimError(
                        f"ResourceClaim {pod.namespace}/{recorded} was not created for pod "
                        f"{pod.ref} (pod is not owner)"
                    )
                return recorded
        generated = claimrules.generated_claim_name(
            self.claims.by_index(claimrules.CLAIMS_BY_OWNER_INDEX, pod.uid),
            pod_claim_name,
            self.protocol,
        )
        if generated:
            return generated
        if recorded and self.protocol.claims_in_spec:
            # In-tree the pod's status names its generated claim for good: as with kcm, a
            # deleted one is not made again under another name (the operator's own pod-writes
            # policy refuses renaming a recorded entry too). The pod is told instead.
            raise ClaimError(
                f"ResourceClaim {pod.namespace}/{recorded}, made for this entry, was deleted; "
                "the pod cannot get its devices: delete the pod (its controller makes a new "
                "one) to have a claim made again"
            )
        template = self.templates.get(Key(pod.namespace, template_name))
        if template is None:
            raise ClaimError(f'resource claim template "{template_name}": not found')
        namespace: Namespace | None = self.namespaces.get(Key("", pod.namespace))
        refusal = claimrules.admin_access_refusal(
            template.spec.spec, namespace, self.gates["DRAAdminAccess"]
        )
        admin = str(claimrules.requests_admin_access(template.spec.spec)).lower()
        if refusal:
            metrics.CLAIM_CREATES.labels(status="failure", admin_access=admin).inc()
            raise ClaimError(refusal)
        body = claimrules.claim_body(pod, pod_claim_name, template, self.protocol)
        try:
            created = await self.client.create(RESOURCE_CLAIMS, body, pod.namespace)
        except Exception as error:
            metrics.CLAIM_CREATES.labels(status="failure", admin_access=admin).inc()
            if await self.runtime.refused_by_fencing(error, pod.ref):
                raise  # not this replica's to make (it stops), or retried soon
            if isinstance(error, ApiError) and failure_kind(error) is FailureKind.REJECTED:
                raise ClaimError(
                    f"create ResourceClaim {body['metadata']['generateName']}: {error.message}"
                ) from error
            raise  # not answered, or not yet: the work queue retries
        metrics.CLAIM_CREATES.labels(status="success", admin_access=admin).inc()
        claim = self.claims.assume(created)
        log.info("claim created", pod=pod.ref, claim=claim.metadata.name, entry=pod_claim_name)
        return claim.metadata.name or ""

    async def _ensure_extended_claim(self, pod: Pod, extended: ExtendedClaim) -> None:
        """The claim the pod's extended resources became, created if it does not exist."""
        theirs = [
            r.device_class_name
            for r in extended.requests
            if r.device_class_name in self.runtime.settings.scheduler_classes
        ]
        if theirs:
            raise ClaimError(
                f"DeviceClass {', '.join(theirs)}: its extended resources are kube-scheduler's "
                "(scheduler_extended_classes), not a claim dralloc allocates"
            )
        claim = self.claims.get(Key(pod.namespace, extended.claim_name))
        if claim is not None:
            if claimrules.owner_pod_uid(claim) != pod.uid:
                raise ClaimError(
                    f"ResourceClaim {pod.namespace}/{extended.claim_name} was not created for "
                    f"pod {pod.ref} (pod is not owner)"
                )
            return
        body = claimrules.extended_claim_body(pod, extended, self.protocol)
        try:
            created = await self.client.create(RESOURCE_CLAIMS, body, pod.namespace)
        except Exception as error:
            metrics.CLAIM_CREATES.labels(status="failure", admin_access="false").inc()
            if await self.runtime.refused_by_fencing(error, pod.ref):
                raise  # not this replica's to make (it stops), or retried soon
            if isinstance(error, ApiError) and failure_kind(error) is FailureKind.REJECTED:
                raise ClaimError(
                    f"create ResourceClaim {extended.claim_name}: {error.message}"
                ) from error
            raise  # not answered, or not yet: the work queue retries
        metrics.CLAIM_CREATES.labels(status="success", admin_access="false").inc()
        self.claims.assume(created)
        log.info("claim created", pod=pod.ref, claim=extended.claim_name, entry=ENTRY_NAME)

    async def _report_unserved_extended(self, pod: Pod, unserved: list[str]) -> None:
        """Say why the pod waits where the user looks, and have it made again where a
        ReplicaSet or StatefulSet owns it (its next pod passes the webhook, which turns the
        extended resources into a claim). Other owners are not asked: a Job counts a deleted
        pod as failed, and others may not make it again at all."""
        owner = (pod.namespace, pod.controller)
        now = time.monotonic()
        deleted_at = self.recreated_for.get(owner)
        # A pod the owner made after we deleted one of its pods came back untranslated too
        # (no webhook configured for it?): no loop of deletes; looked at again later.
        came_back = (
            deleted_at is not None
            and now - deleted_at[1] < RECREATE_MEMORY
            and pod.created >= deleted_at[0]
        )
        recreate = (
            pod.controller.partition("/")[0] in RECREATED_OWNERS
            and self.runtime.settings.recreate_refused_pods
            and not came_back
        )
        if recreate:
            outcome = f"the pod is deleted so that {pod.controller} creates it again"
        elif came_back:
            outcome = (
                f"{pod.controller}'s pods keep arriving untranslated: is dralloc's mutating "
                "webhook configured for them (components/gate-by-policy removes it)?"
            )
        else:
            outcome = "delete the pod and create it again"
        message = (
            f"the pod asks for {', '.join(unserved)} as extended resources, but it was "
            "created without dralloc's admission webhook (unavailable, or the class is "
            "newer than the pod), so no claim serves them and kube-scheduler may not "
            f"allocate devices dralloc manages; {outcome}"
        )
        if recreate:
            # A conflict (the pod changed) raises: the work queue reads it again.
            with contextlib.suppress(NotFound):
                await self.client.delete(
                    PODS,
                    pod.name,
                    namespace=pod.namespace,
                    uid=pod.uid,
                    resource_version=pod.resource_version,
                )
            self._remember_recreated(owner, now)
            await self.runtime.events.post(
                pod.involved(), REASON_EXTENDED_NOT_SERVED, message, warning=True
            )
            log.info("pod deleted for its controller to recreate", pod=pod.ref)
            return
        await self.runtime.events.post(
            pod.involved(), REASON_EXTENDED_NOT_SERVED, message, warning=True
        )
        await podcondition.set_condition(
            self.client,
            pod,
            "False",
            REASON_EXTENDED_NOT_SERVED,
            message,
            still_needed=lambda fresh: bool(self._unserved_extended(fresh)),
            protocol=self.protocol,
        )
        if came_back and deleted_at is not None:
            wait = RECREATE_MEMORY - (now - deleted_at[1])
            self.queue.add_after(("pod", Key(pod.namespace, pod.name)), wait)

    def _remember_recreated(self, owner: tuple[str, str], now: float) -> None:
        for key, (_, at) in list(self.recreated_for.items()):
            if now - at >= RECREATE_MEMORY:
                del self.recreated_for[key]
        wall = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.recreated_for[owner] = (wall, now)

    def _own_claim(self, pod: Pod, entry: PodResourceClaim) -> ResourceClaim | None:
        """The claim of one pod entry, if it is the pod's own (see claimrules.own_claim)."""
        return claimrules.own_claim(
            pod,
            entry,
            lambda name: self.claims.get(Key(pod.namespace, name)),
            self.claims.by_index(claimrules.CLAIMS_BY_OWNER_INDEX, pod.uid),
            self.protocol,
        )

    async def _reserve_for_bound_pod(self, pod: Pod) -> None:
        """A pod bound by someone else: reserve its allocated claims for it (upstream does).

        Only the pod's own claims: one it names, in its namespace, or one generated for it. A
        generated claim of another pod, recorded in this pod's claim-statuses annotation by
        whoever could write it, is never reserved for this pod.
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

    async def _correct_devices_annotation(self, pod: Pod, version: str) -> None:
        """A bound pod's devices annotation says what its claims say, or nothing.

        The workload reads its devices from the annotation; the claims (allocation and a
        reservation for the pod's UID) are what was really allocated. An annotation that
        disagrees (written by someone else, or stale) is rewritten from the claims, or
        removed when the pod's claims are not all allocated for it, with a Warning Event. An
        annotation that is merely missing is written without one (the allocation
        controller's pod write may not have happened yet, or the pod was bound by someone
        else).
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

    # --- claims ----------------------------------------------------------------------------

    async def sync_claim(self, key: Key) -> None:
        claim = self.claims.get(key)
        if claim is None:
            return
        states: dict[str, PodState] = {}
        for entry in claim.status.reserved_for if claim.status else ():
            if (entry.api_group or "") == "" and entry.resource == "pods":
                states[entry.uid] = await self._pod_state(key.namespace, entry.name, entry.uid)
        owner_uid = claimrules.owner_pod_uid(claim)
        owner_state = None
        if owner_uid is not None:
            owner_state = self._cached_owner_state(key.namespace, owner_uid)
        plan = claimrules.plan_claim(
            claim, lambda _name, uid: states[uid], owner_state, self.protocol
        )
        if plan.nothing:
            return
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
                return  # gone at once: no finalizer held it
            self.claims.assume(deleted)
            version = str(meta.get("resourceVersion") or version)
            finalizers = list(meta.get("finalizers") or ())
        if plan.remove_finalizer and self.protocol.finalizer in finalizers:
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
                    # Deleted meanwhile: nothing holds it any more. A 404 that does not name
                    # the claim (the route, not the object) hides nothing: the next event
                    # tries again.
                    self.claims.assume_gone(key, claim.metadata.uid or "")
                return
            # Without finalizers left, the answer means it is gone: the cache hides it (the
            # watch still shows it held for a moment, and a sync then would patch it again).
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

    def _cached_owner_state(self, namespace: str, owner_uid: str) -> PodState | None:
        """Done, replaced or deleted owners make a generated claim deletable. A deleted one
        is known by its deletion in our watch: then the claim goes now, with its allocation,
        rather than deallocated first and deleted by the garbage collector later."""
        for pod in self.pods.by_index(claimrules.PODS_BY_UID_INDEX, owner_uid):
            return PodState.DONE if pod.done else PodState.IN_USE
        if owner_uid in self.deleted_pod_uids:
            return PodState.GONE
        return None


def _entry(pod: Pod, name: str) -> Any:
    for pod_claim in pod.claims:
        if pod_claim.name == name:
            return pod_claim
    raise KeyError(name)


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
