"""Devices allocated to two claims at once: found, reported, and undone on one side.

dralloc never hands out a device it sees allocated, but it is not always the only writer of
allocations. In-tree, kube-scheduler allocates the claims of pods that bypass dralloc's gate
(the webhook was down, the namespace is not selected, the pod was created bound), and neither
side sees the other's newest writes: kube-scheduler can hand out a device dralloc has just
written before its informer shows it, and the other way round (upstream has no protocol
between allocators; docs/design.md "Upstream references"). Both writes land, since they are to different
claims. Someone with write access to claim status can also forge one on either API.

So this controller keeps an index of exclusively allocated devices (no share, no admin
access) from the claim watch. When a device has two holders for longer than
:data:`SETTLE_SECONDS` (a relist may show a new allocation before the old one's release),
one holder keeps it and the others are undone, with a Warning Event that names the device and
both claims, on the claims and their pods. How a holder can be undone decides who keeps it:

- **deallocate**, when every consumer is a pod that is still gated (nothing but dralloc can
  bind it then) and dralloc is not writing that allocation or pod right now: the pod is
  allocated again, afresh;
- **evict**, when the claim was generated for one pod and a controller owns that pod: the pod
  is deleted with a UID and resourceVersion precondition (so not if it was bound meanwhile),
  and its controller makes a new one;
- **report** otherwise: bare pods (deleting one would lose it), claims shared by name (their
  next consumers would be reserved on the same allocation), consumers that are not pods, or
  pods the cache does not know.

The holder that is hardest to undo keeps the device; among equals, the allocation this
controller saw first (writers choose allocationTimestamp; a forged one must not win by it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import time
from collections.abc import Iterable
from typing import Any, Protocol

import structlog

from operators import metrics
from operators.api.models import ResourceClaim
from operators.cache.core import Pod
from operators.cache.informer import Change, Key, version_number
from operators.controllers import claimrules, claimstatus, conditions, podcondition
from operators.controllers.runtime import Runtime, register_controller, retry_forever
from operators.kube import PODS, RESOURCE_CLAIMS, Conflict, NotFound, failure_kind

log = structlog.get_logger(__name__)

REASON_DOUBLE = "DoubleAllocation"
REASON_DOUBLE_ENDED = "DoubleAllocationEnded"
SETTLE_SECONDS = 2.0
CHECK_PERIOD = 1.0

DeviceId = tuple[str, str, str]


class Undo(enum.IntEnum):
    """How a holder can be undone, cheapest first."""

    DEALLOCATE = 0
    EVICT = 1
    REPORT = 2


@dataclasses.dataclass(frozen=True)
class Holder:
    """One claim holding a device, as far as choosing the one that keeps it goes."""

    key: Key
    undo: Undo
    first_seen: int
    """resourceVersion at which this controller first saw the allocation."""


def exclusive_devices(claim: ResourceClaim | None) -> frozenset[DeviceId]:
    """The devices a claim holds alone: results without a share and without admin access."""
    allocation = claim.status.allocation if claim is not None and claim.status else None
    if allocation is None:
        return frozenset()
    return frozenset(
        (r.driver, r.pool, r.device)
        for r in allocation.devices.results
        if r.share_id is None and not r.admin_access
    )


def choose_keeper(holders: Iterable[Holder]) -> tuple[Holder, list[Holder]]:
    """The holder that keeps the device, and the ones to undo (deterministic)."""
    ordered = sorted(holders, key=lambda h: (-h.undo, h.first_seen, h.key))
    return ordered[0], ordered[1:]


class Busy(enum.Enum):
    """A holder whose allocation or pod dralloc is writing right now: look again later."""

    BUSY = "busy"


BUSY = Busy.BUSY


class Writer(Protocol):
    def writing(self, claim: Key, pods: Iterable[Key]) -> bool: ...


class DoubleAllocationController:
    name = "double-allocations"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.client = runtime.client
        self.pods = runtime.cache[PODS]
        self.claims = runtime.cache[RESOURCE_CLAIMS]
        self.holders: dict[DeviceId, set[Key]] = {}
        self.held: dict[Key, frozenset[DeviceId]] = {}
        self.first_seen: dict[Key, int] = {}
        self.since: dict[DeviceId, float] = {}
        self.repaired = 0
        self.reported = 0
        self._reported: set[tuple[DeviceId, Key, frozenset[Key]]] = set()
        # Devices two claims hold now, each with when it began (not reset by a repair that
        # has to look again). The gauge an alert fires on counts those that outlasted
        # SETTLE_SECONDS, as the repairs do: a relist may show a new allocation a moment
        # before the release it followed, which was never a double on the server. Counted
        # while this replica leads.
        self.doubled: dict[DeviceId, float] = {}
        # Pods whose condition reports a double (not undone): looked at every period until
        # none of their claims' devices has another holder, then told what holds now, so the
        # condition does not keep saying it for good. Seeded from the pods' conditions when
        # this replica starts leading (another replica may have reported them).
        self.reported_pods: set[Key] = set()
        self.running = False
        self.claims.add_handler(self._on_claim)

    def _on_claim(self, change: Change[ResourceClaim]) -> None:
        key = change.key
        now = exclusive_devices(change.new)
        before = self.held.pop(key, frozenset())
        if now:
            self.held[key] = now
            if not before:
                version = change.new.metadata.resource_version if change.new else ""
                self.first_seen[key] = version_number(version or "")
        else:
            self.first_seen.pop(key, None)
        for device in before - now:
            keys = self.holders.get(device)
            if keys is not None:
                keys.discard(key)
                if len(keys) < 2:
                    self.since.pop(device, None)
                    self.doubled.pop(device, None)
                    self._reported = {r for r in self._reported if r[0] != device}
                if not keys:
                    del self.holders[device]
        for device in now - before:
            keys = self.holders.setdefault(device, set())
            keys.add(key)
            if len(keys) > 1:
                self.since.setdefault(device, time.monotonic())
                self.doubled.setdefault(device, time.monotonic())
        self._count(time.monotonic())

    def seed_reported(self) -> None:
        """Reports another replica (or this one, before) left on pods: told once they end."""
        self.reported_pods.update(
            key
            for key, pod in self.pods.items()
            if (podcondition.current(pod) or {}).get("reason") == REASON_DOUBLE
        )

    def lasting(self, clock: float) -> int:
        """Devices held twice for at least :data:`SETTLE_SECONDS` at ``clock``."""
        return sum(1 for since in self.doubled.values() if clock - since >= SETTLE_SECONDS)

    def _count(self, clock: float) -> None:
        if self.running:
            metrics.DEVICES_HELD_TWICE.set(self.lasting(clock))

    async def run(self) -> None:
        self.running = True
        self._count(time.monotonic())
        self.seed_reported()
        try:
            await retry_forever(self.name, self._loop)
        finally:  # no longer leading: another replica counts them
            self.running = False
            metrics.DEVICES_HELD_TWICE.set(0)

    def health(self) -> dict[str, Any]:
        return {"doubles": len(self.since), "repaired": self.repaired, "reported": self.reported}

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(CHECK_PERIOD)
            clock = time.monotonic()
            self._count(clock)
            await self._tell_ended()
            for device, since in sorted(self.since.items()):
                if clock - since < SETTLE_SECONDS:
                    continue
                try:
                    await self._repair(device)
                except (Conflict, NotFound):
                    continue  # changed under us: the watch tells what is left
                except Exception as error:
                    if failure_kind(error) is None:
                        raise
                    log.warning("double allocation not repaired yet", error=str(error)[:300])

    def _writer(self) -> Writer | None:
        for controller in self.runtime.controllers:
            if controller.name == "allocation":
                return controller  # type: ignore[return-value]
        return None

    def _holder(self, key: Key) -> tuple[Holder, ResourceClaim, list[Pod]] | Busy | None:
        claim = self.claims.get(key)
        if claim is None or claim.status is None or claim.status.allocation is None:
            return None
        consumers = claim.status.reserved_for
        pods = [
            pod
            for entry in consumers
            if (entry.api_group or "") == "" and entry.resource == "pods"
            for pod in [self.pods.get(Key(key.namespace, entry.name))]
            if pod is not None and pod.uid == entry.uid
        ]
        writer = self._writer()
        if writer is not None and writer.writing(key, [Key(p.namespace, p.name) for p in pods]):
            return BUSY
        known = len(pods) == len(consumers)  # every consumer a pod we know
        owner = claimrules.owner_pod_uid(claim)
        if known and pods and all(pod.gated for pod in pods):
            undo = Undo.DEALLOCATE
        elif (
            known
            and len(pods) == 1
            and owner == pods[0].uid
            and pods[0].controller
            and not pods[0].gated
        ):
            undo = Undo.EVICT
        else:
            undo = Undo.REPORT
        first = self.first_seen.get(key, version_number(claim.metadata.resource_version or ""))
        return Holder(key, undo, first), claim, pods

    async def _repair(self, device: DeviceId) -> None:
        looked = [self._holder(key) for key in sorted(self.holders.get(device, ()))]
        if any(h is BUSY for h in looked):
            self.since[device] = time.monotonic()  # dralloc's own write is still landing
            return
        found = [h for h in looked if isinstance(h, tuple)]
        if len(found) < 2:
            self.since.pop(device, None)
            return
        by_key = {holder.key: (claim, pods) for holder, claim, pods in found}
        keeper, undo = choose_keeper(holder for holder, _, _ in found)
        name = "/".join(device)
        for holder in undo:
            claim, pods = by_key[holder.key]
            if any(pod.deleting for pod in pods):
                continue  # an eviction is under way: its end releases the claim
            message = (
                f"device {name} was also allocated to resourceclaim {keeper.key} "
                "(two allocators wrote at once, or an allocation was forged)"
            )
            if holder.undo is Undo.DEALLOCATE:
                await self._deallocate(claim)
                message += f"; the allocation of {holder.key} was cleared, to be made again"
                outcome = "deallocated"
            elif holder.undo is Undo.EVICT:
                (pod,) = pods
                await self._evict(pod, message)
                message += f"; its pod was evicted for {pod.controller} to recreate"
                outcome = "evicted"
            else:
                marker = (device, holder.key, frozenset(h.key for h, _, _ in found))
                if marker in self._reported:
                    continue
                message += (
                    f"; {holder.key} cannot be undone safely (a bare pod, a claim shared by "
                    "name, or a consumer dralloc does not know): free it to give the device back"
                )
                outcome = "reported"
            metrics.DOUBLE_ALLOCATIONS.labels(outcome=outcome).inc()
            if outcome == "reported":
                self.reported += 1
            else:
                self.repaired += 1
            log.warning(
                "double allocation", device=name, kept=str(keeper.key), undone=str(holder.key),
                outcome=outcome,
            )  # fmt: skip
            for involved in [claimstatus.involved(claim), *(pod.involved() for pod in pods)]:
                await self.runtime.events.post(involved, REASON_DOUBLE, message, warning=True)
            if outcome == "reported":
                # It lasts: said on the pods too, where `kubectl describe` shows it; told
                # once (the marker only once both writes are done, so a failed one is
                # tried again), until the double ends.
                for pod in pods:
                    await podcondition.set_condition(
                        self.client,
                        pod,
                        "True" if pod.node_name else "False",
                        REASON_DOUBLE,
                        message,
                        still_needed=lambda fresh: not fresh.done,
                        protocol=self.runtime.protocol,
                    )
                self._reported.add((device, holder.key, frozenset(h.key for h, _, _ in found)))
                self.reported_pods.update(Key(p.namespace, p.name) for p in pods)
        # Looked at again while two still hold it: an eviction still under way, a write of
        # dralloc's own still in flight, or a new holder that came while this ran
        # (kube-scheduler may count a device free once one side of a double let it go).
        if len(self.holders.get(device, ())) > 1:
            self.since[device] = time.monotonic()
        else:
            self.since.pop(device, None)

    def _doubled(self, pod: Pod) -> bool:
        """Whether a claim of the pod holds a device that another claim holds too."""
        for name in pod.claim_names():
            for device in self.held.get(Key(pod.namespace, name), ()):
                if len(self.holders.get(device, ())) > 1:
                    return True
        return False

    async def _tell_ended(self) -> None:
        """Reported pods whose double has ended: their condition says what holds now.

        A pod still in a double keeps its report (looked at again next period); one whose
        condition no longer speaks of a double (another controller wrote it since) is left
        alone. Whichever side was freed decides what it is told: every claim of the pod still
        allocated and reserved for it, it has its devices; a claim freed (deallocated, or
        reserved for it no more), it has not."""
        for key in sorted(self.reported_pods):
            pod = self.pods.get(key)
            if (
                pod is None
                or pod.deleting
                or (podcondition.current(pod) or {}).get("reason") != REASON_DOUBLE
            ):
                self.reported_pods.discard(key)
                continue
            if self._doubled(pod):
                continue
            freed = [
                name
                for name in pod.claim_names()
                for claim in [self.claims.get(Key(pod.namespace, name))]
                if claim is None
                or claim.status is None
                or claim.status.allocation is None
                or not any(r.uid == pod.uid for r in claim.status.reserved_for)
            ]
            if freed:
                status, reason = "False", REASON_DOUBLE_ENDED
                message = (
                    f"the double allocation ended: resourceclaim {', '.join(freed)} no longer "
                    "holds devices for this pod"
                )
            elif pod.node_name:
                status, reason = "True", podcondition.REASON_ALLOCATED
                message = (
                    f"allocated on node {pod.node_name}; the double allocation ended: no "
                    "device of this pod is allocated to another claim"
                )
            else:
                status, reason = "False", REASON_DOUBLE_ENDED
                message = (
                    "not placed yet; the double allocation ended: no device of this pod is "
                    "allocated to another claim"
                )
            try:
                await podcondition.set_condition(
                    self.client, pod, status, reason, message,
                    still_needed=lambda fresh: (
                        (podcondition.current(fresh) or {}).get("reason") == REASON_DOUBLE
                    ),
                    protocol=self.runtime.protocol,
                )  # fmt: skip
            except (Conflict, NotFound):
                pass  # changed too often, or gone: the report stays, or no one reads it
            except Exception as error:
                if failure_kind(error) is None:
                    raise
                log.warning("end of a double not told yet", pod=str(key), error=str(error)[:300])
                continue  # tried again next period
            self.reported_pods.discard(key)
            log.info("double allocation ended", pod=str(key), freed=freed)

    async def _deallocate(self, claim: ResourceClaim) -> None:
        status = claimstatus.summarized(
            {"reservedFor": None, **claimstatus.deallocation(self.runtime.protocol)},
            self.runtime.protocol,
        )
        await self.client.merge_patch(
            RESOURCE_CLAIMS,
            claim.metadata.name or "",
            {"status": status},
            namespace=claim.metadata.namespace,
            resource_version=claim.metadata.resource_version,
            subresource="status",
        )

    async def _evict(self, pod: Pod, message: str) -> None:
        condition = conditions.condition(
            "DisruptionTarget",
            "True",
            "DeletionByDralloc",
            f"dralloc: {message}",
            transition=datetime.datetime.now(datetime.UTC),
        )
        # Both writes are conditional on the version the decision read (the condition's
        # answer is the next one): a pod bound or changed since is left alone.
        updated = await self.client.request(
            "PATCH",
            PODS.path(pod.namespace, pod.name, "status"),
            body={
                "metadata": {"uid": pod.uid, "resourceVersion": pod.resource_version},
                "status": {"conditions": [condition]},
            },
            content_type="application/strategic-merge-patch+json",
        )
        version = (updated.get("metadata") or {}).get("resourceVersion") or pod.resource_version
        await self.client.delete(
            PODS, pod.name, namespace=pod.namespace, uid=pod.uid, resource_version=version
        )


def _rfc3339(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value)


register_controller(
    DoubleAllocationController.name,
    lambda runtime: (
        DoubleAllocationController(runtime) if runtime.settings.allocation_controller else None
    ),
)
