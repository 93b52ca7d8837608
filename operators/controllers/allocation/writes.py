"""The allocation's writes, in the order that makes a crash between them harmless.

Each write is conditional on the resourceVersion it read:

1. per claim being allocated: our finalizer, then ``status.allocation`` + ``reservedFor``;
2. per claim already allocated (shared claims): the pod appended to ``reservedFor``;
3. the pod: devices annotation, claim statuses, node affinity pinned to the node (where the
   API mode pins: :attr:`~operators.api.podprotocol.PodProtocol.pins_node`), gate removed.
   In-tree, claim statuses live in the pod's status subresource: that write comes first.

A crash between writes leaves claims allocated *and reserved for this pod*, which the next
sync reads as "already allocated, pin the pod there" and so finishes the job. A claim write
that got no answer may still have been applied: its devices stay counted as used
(:class:`UnansweredWrite`) until the watch or a live read tells which it was.

:class:`ClaimWriter` keeps what is being written (claims in flight, unanswered writes, pods
whose own write the watch has not shown yet): the decision waits for those, and another
controller asks :meth:`ClaimWriter.writing` before it undoes anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import time
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from operators.allocator.results import ClaimAllocation
from operators.allocator.state import AllocatorState
from operators.api.annotations import PodClaimDevices, format_pod_devices
from operators.api.models import AllocationResult, ResourceClaim
from operators.cache.assume import AssumeCache
from operators.cache.core import (
    DEVICES_ANNOTATION,
    POD_CLAIMS_INDEX,
    SCHEDULING_GATE,
    Pod,
)
from operators.cache.informer import Informer, Key, version_number
from operators.controllers import claimrules, claimstatus, placerules, podcondition
from operators.controllers.allocation.outcomes import Entries
from operators.controllers.allocation.reporting import Reporter
from operators.controllers.allocation.thread import DecisionThread
from operators.controllers.claimrules import claim_key, is_allocated, pending
from operators.controllers.runtime import Runtime
from operators.controllers.workqueue import WorkQueue
from operators.fencing import ALLOCATED_BY_ANNOTATION, AllocationRecord
from operators.kube import (
    PODS,
    RESOURCE_CLAIMS,
    Conflict,
    FailureKind,
    KubeClient,
    NotFound,
    failure_kind,
    timestamp,
)

log = structlog.get_logger("operators.controllers.allocation")

CONFIRM_PERIOD = 1.0  # seconds between live reads of claims whose write got no answer
LANDING_BOUND = 65.0
"""Seconds after which a write the server has not applied never will be: kube-apiserver ends
a request after its --request-timeout (60 s by default), whether or not the client waits."""


@dataclasses.dataclass(frozen=True)
class UnansweredWrite:
    """A claim whose allocation write got no answer; its devices stay assumed until known."""

    claim: ResourceClaim
    resource_version: str
    """The precondition of the write: any later version of the claim settles the question."""
    sent: float = dataclasses.field(default_factory=time.monotonic)
    """When the write was sent (monotonic): a live read of the precondition's version says
    only "not yet", until LANDING_BOUND has passed since."""


class ClaimWriter:
    """The allocation controller's write protocol, and what it is writing now."""

    def __init__(
        self,
        runtime: Runtime,
        pods: Informer[Pod],
        claims: AssumeCache[ResourceClaim],
        state: AllocatorState,
        decisions: DecisionThread,
        queue: WorkQueue[Key],
        reporter: Reporter,
        wake: Callable[[], None],
    ) -> None:
        self.runtime = runtime
        self.client: KubeClient = runtime.client
        self.pods = pods
        self.claims = claims
        self.state = state
        self.decisions = decisions
        self.queue = queue
        self.reporter = reporter
        self.wake = wake
        """Retries the pods waiting for room (devices of an unanswered write were freed)."""
        self.claims_in_flight: set[Key] = set()
        """Claims whose writes are under way: the decision waits for them (ClaimBusy)."""
        self.unanswered: dict[Key, UnansweredWrite] = {}
        """Claims whose allocation write got no answer; their devices stay counted as used."""
        self.written: dict[Key, int] = {}
        """Pods we wrote, by the resourceVersion the API returned: older cached versions of
        them are stale, and acting on one would only produce a conflict."""

    def writing(self, claim: Key, pods: Iterable[Key], pods_in_flight: set[Key]) -> bool:
        """Whether a claim's allocation or its pods are still being written (the watch has
        not shown the result yet)."""
        return (
            claim in self.claims_in_flight
            or claim in self.unanswered
            or any(pod in pods_in_flight or pod in self.written for pod in pods)
        )

    def saw_pod(self, key: Key, pod: Pod | None) -> None:
        """The watch showed a version of a pod we wrote (None: it is gone)."""
        written = self.written.get(key)
        if written is not None and (pod is None or version_number(pod.resource_version) >= written):
            del self.written[key]

    async def write_claims(
        self,
        pod: Pod,
        node: str,
        entries: Entries,
        results: list[ClaimAllocation],
    ) -> dict[str, AllocationResult]:
        """The claim writes (allocations and reservations), per pod entry name; an error
        releases what was assumed but not written."""
        allocations: dict[str, AllocationResult] = {}
        new = {
            claim.metadata.name: result
            for (_, claim), result in zip(pending(entries), results, strict=True)
        }
        try:
            for entry, claim in entries:
                allocation = claim.status.allocation if claim.status else None
                fresh = new.get(claim.metadata.name)
                if fresh is not None:
                    allocation = await self.write_allocation(pod, node, claim, fresh)
                elif not any(r.uid == pod.uid for r in claim.status.reserved_for):  # type: ignore[union-attr]
                    await self.write_reservation(pod, claim)
                assert allocation is not None
                allocations[entry.name] = allocation
        except BaseException as error:
            # No answer: the server may have applied it. A write cut off by our own
            # cancellation (a lost Lease, shutdown) is as unknown as a dropped connection.
            unanswered = isinstance(error, asyncio.CancelledError) or (
                isinstance(error, Exception) and failure_kind(error) is FailureKind.UNAVAILABLE
            )
            for _, claim in pending(entries):
                key = claim_key(claim)
                if unanswered and key in self.unanswered:
                    # May have landed: keep its devices until we know (the watch may already
                    # have shown it while the write was in flight).
                    if (seen := self.claims.informer.get(key)) is not None:
                        self.settle_if_newer(key, seen)
                    continue
                self.unanswered.pop(key, None)
                if not self._write_landed(claim):
                    self.decisions.mutate(self.state.release, claim)
            raise
        return allocations

    def _write_landed(self, claim: ResourceClaim) -> bool:
        current = self.claims.get(Key(claim.metadata.namespace or "", claim.metadata.name or ""))
        return current is not None and is_allocated(current)

    def settle_if_newer(self, key: Key, current: ResourceClaim | None) -> None:
        """Settle an unanswered write by a claim (None: deleted) newer than its precondition."""
        unanswered = self.unanswered.get(key)
        if unanswered is not None and (
            current is None
            or version_number(current.metadata.resource_version or "")
            > version_number(unanswered.resource_version)
        ):
            self._settle_unanswered(key, current)

    def _settle_unanswered(self, key: Key, current: ResourceClaim | None) -> None:
        """We now know whether an unanswered allocation write landed; requeue its pods."""
        unanswered = self.unanswered.pop(key, None)
        if unanswered is None:
            return
        landed = is_allocated(current)
        if not landed:
            self.decisions.mutate(self.state.release, unanswered.claim)
            self.wake()
        elif current is not None:
            self.decisions.mutate(
                self.state.landed, unanswered.claim, current.metadata.resource_version or ""
            )
        # If it landed, the devices stay assumed until the watch shows the allocation (a
        # late event of an older version must not make them look free in between).
        log.info("unanswered allocation write settled", claim=str(key), landed=landed)
        for pod_key in self.pods.index_keys(POD_CLAIMS_INDEX, (key.namespace, key.name)):
            self.queue.add(pod_key)

    async def confirm_unanswered(self) -> None:
        """Read claims whose allocation write got no answer, until each is settled."""
        while True:
            await asyncio.sleep(CONFIRM_PERIOD)
            for key in sorted(self.unanswered):
                write = self.unanswered.get(key)
                if write is None or key in self.claims_in_flight:
                    continue  # settled meanwhile, or its write is being retried right now
                try:
                    raw = await self.client.get(RESOURCE_CLAIMS, key.name, key.namespace)
                except NotFound:
                    read: ResourceClaim | None = None
                except Exception as error:
                    if failure_kind(error) is None:
                        raise
                    break  # still unavailable: try again next period
                else:
                    read = self.claims.assume(raw)
                # The read answers for this write only: while it was under way the write may
                # have been settled by the watch and a new one sent for the claim.
                if self.unanswered.get(key) is not write or key in self.claims_in_flight:
                    continue
                if read is None or is_allocated(read):
                    self._settle_unanswered(key, read)
                elif version_number(read.metadata.resource_version or "") > version_number(
                    write.resource_version
                ):
                    self._settle_unanswered(key, read)  # changed since: the write cannot land
                elif time.monotonic() - write.sent > LANDING_BOUND:
                    self._settle_unanswered(key, read)  # the server has given up on it
                # else: not applied yet, but the server may still be working on it

    async def write_allocation(
        self, pod: Pod, node: str, claim: ResourceClaim, result: ClaimAllocation
    ) -> AllocationResult:
        namespace, name = claim.metadata.namespace or "", claim.metadata.name or ""
        version = claim.metadata.resource_version
        finalizers = list(claim.metadata.finalizers or ())
        finalizer = self.runtime.protocol.finalizer
        if finalizer not in finalizers:
            updated = await self.client.merge_patch(
                RESOURCE_CLAIMS,
                name,
                {"metadata": {"finalizers": [*finalizers, finalizer]}},
                namespace=namespace,
                resource_version=version,
            )
            version = updated["metadata"]["resourceVersion"]
            self.claims.assume(updated)
        allocation = result.to_dict()
        allocation["allocationTimestamp"] = timestamp()
        reserved = [
            entry.to_kube() for entry in (claim.status.reserved_for if claim.status else ())
        ]
        reserved.append(consumer(pod))
        status = claimstatus.summarized(
            {"allocation": allocation, "reservedFor": reserved}, self.runtime.protocol
        )
        claim_conditions = (
            claimstatus.updated_conditions(
                claim,
                "True",
                claimstatus.REASON_ALLOCATED,
                f"allocated on node {node}",
                datetime.datetime.now(datetime.UTC),
            )
            if self.runtime.protocol.claim_conditions
            else None
        )
        if claim_conditions is not None:
            status["conditions"] = claim_conditions
        key = Key(namespace, name)
        self.unanswered[key] = UnansweredWrite(claim, str(version))
        updated = await self.client.merge_patch(
            RESOURCE_CLAIMS,
            name,
            {"status": status},
            namespace=namespace,
            resource_version=version,
            subresource="status",
        )
        self.unanswered.pop(key, None)  # answered: it landed, whatever the watch showed first
        self.decisions.mutate(self.state.landed, claim, str(updated["metadata"]["resourceVersion"]))
        stored = self.claims.assume(updated)
        assert stored.status is not None and stored.status.allocation is not None
        return stored.status.allocation

    async def write_reservation(self, pod: Pod, claim: ResourceClaim) -> None:
        assert claim.status is not None
        reserved = [entry.to_kube() for entry in claim.status.reserved_for]
        reserved.append(consumer(pod))
        await claimstatus.patch_status(
            self.client,
            self.claims,
            claim.metadata.name or "",
            claim.metadata.namespace,
            claim.metadata.resource_version,
            claimstatus.summarized({"reservedFor": reserved}, self.runtime.protocol),
        )

    async def write_pod(
        self,
        pod: Pod,
        node: str,
        entries: Entries,
        allocations: dict[str, AllocationResult],
    ) -> None:
        devices = format_pod_devices(
            PodClaimDevices.from_allocation(
                entry.name, claim.metadata.name or "", allocations[entry.name]
            )
            for entry, claim in entries
        )
        # Who allocated it: another allocator seeing this may stand down, and a gang member
        # whose claims are cleared after its release is allocated again on this word.
        record = AllocationRecord(self.runtime.allocator, time.time())
        annotations = {DEVICES_ANNOTATION: devices, ALLOCATED_BY_ANNOTATION: record.render()}
        protocol = self.runtime.protocol
        version = pod.resource_version
        # The pod as last read, to send back whole (an update costs the API server less
        # than a merge patch); merge_update checks that it is the version written to.
        base = self.pods.raw(Key(pod.namespace, pod.name))
        patch: dict[str, Any] = {"metadata": {"annotations": annotations}}
        statuses = claimrules.statuses_update(
            pod,
            {
                entry.name: claim.metadata.name
                for entry, claim in entries
                if entry.resource_claim_template_name is not None
            },
        )
        if statuses is not None:
            recorded, subresource = protocol.statuses_write(statuses)
            if protocol.statuses_in_pod_patch:
                patch = merge(patch, recorded)  # see claims.py: one write
            else:
                # Before the gate goes: kube-scheduler and the kubelet find the generated
                # claims by these names.
                written = await self.client.merge_update(
                    PODS,
                    pod.name,
                    recorded,
                    base=base,
                    namespace=pod.namespace,
                    resource_version=version,
                    subresource=subresource,
                )
                version = written["metadata"]["resourceVersion"]
                base = written
        if pod.gated:
            remaining = [{"name": g} for g in pod.scheduling_gates if g != SCHEDULING_GATE]
            patch["spec"] = {"schedulingGates": remaining or None}
            if protocol.pins_node:
                patch["spec"]["affinity"] = {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": placerules.pin_affinity(
                            pod.required_affinity, node
                        )
                    }
                }
        updated = await self.client.merge_update(
            PODS,
            pod.name,
            patch,
            base=base,
            namespace=pod.namespace,
            resource_version=version,
        )
        self.written[Key(pod.namespace, pod.name)] = version_number(
            updated["metadata"]["resourceVersion"]
        )
        if pod.annotations.get(DEVICES_ANNOTATION) not in (None, devices):
            # Not ours (the claims were not allocated for the pod until now): say so.
            await self.runtime.events.post(
                pod.involved(),
                claimrules.REASON_DEVICES_CORRECTED,
                f"annotation {DEVICES_ANNOTATION} did not match the pod's ResourceClaims; "
                "rewritten from them",
                warning=True,
            )
        if podcondition.current(pod) is not None:
            with contextlib.suppress(Conflict, NotFound):
                await self.reporter.set_condition(
                    pod,
                    "True",
                    podcondition.REASON_ALLOCATED,
                    f"allocated on node {node}",
                    resource_version=updated["metadata"]["resourceVersion"],
                )


def merge(patch: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Two merge patches as one (nested objects merged, ``more`` wins)."""
    out = dict(patch)
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def consumer(pod: Pod) -> dict[str, str]:
    return {"resource": "pods", "name": pod.name, "uid": pod.uid}
