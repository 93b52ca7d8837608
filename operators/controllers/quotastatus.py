"""DeviceQuota status: the usage the allocator counts, whether the quota is valid, and whether
usage is over a limit (a Warning Event when it goes over).

The allocator's quota book (allocator/quota.py) is the only place usage is computed; this
module copies it to each quota's ``status.used`` and ``Valid`` condition, and to the
metrics, at most once a second and only when something changed. The status is a report:
nothing reads it back (a restarted operator recomputes usage from the claims).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from operators import metrics
from operators.allocator.quota import QuotaBook, QuotaStatus, Usage
from operators.api.meta import Condition
from operators.api.models import DeviceQuota
from operators.api.quantity import Quantity
from operators.cache.informer import Key
from operators.controllers import conditions
from operators.kube import DEVICE_QUOTAS, FailureKind, KubeClient, failure_kind

log = structlog.get_logger(__name__)

CONDITION = "Valid"
EXCEEDED = "Exceeded"
REASON_EXCEEDED = "OverLimit"
REASON_WITHIN = "WithinLimits"
NOT_ENFORCED = ("False", "NotEnforced", "the quota limits nothing while it is invalid (see Valid)")
PERIOD = 1.0  # seconds between looks at the book


def used_json(quota: DeviceQuota, used: Usage) -> dict[str, Any]:
    """``status.used`` in the notation of the limits (160Gi, not 171798691840)."""
    hard = quota.spec.hard.capacity
    capacity = {
        name: str(Quantity.from_nanos(used.capacity.get(name, 0), limit.format))
        for name, limit in sorted(hard.items())
    }
    return {"devices": used.devices, "claims": used.claims, "capacity": capacity}


def valid_condition(status: QuotaStatus) -> tuple[str, str, str]:
    """(status, reason, message) of the Valid condition."""
    if status.invalid is None:
        return "True", "Enforced", "the allocator enforces this quota"
    if status.blocking:
        return (
            "False",
            status.reason,
            f"{status.invalid}; allocations of the class in this namespace wait until it is fixed",
        )
    return "False", status.reason, f"{status.invalid}; the quota limits nothing"


def over_limits(quota: DeviceQuota, used: Usage) -> list[str]:
    """Each limit usage is over, as ``devices: 3 used, hard 1``: the quota was lowered below
    what is allocated, or someone else allocated (kube-scheduler, a write by hand). dralloc
    itself never allocates past a limit; it frees nothing either, it only allocates no more."""
    hard = quota.spec.hard
    over: list[str] = []
    if hard.devices is not None and used.devices > hard.devices:
        over.append(f"devices: {used.devices} used, hard {hard.devices}")
    if hard.claims is not None and used.claims > hard.claims:
        over.append(f"claims: {used.claims} used, hard {hard.claims}")
    for name, limit in sorted(hard.capacity.items()):
        amount = used.capacity.get(name, 0)
        if amount > limit.nanos:
            over.append(f"{name}: {Quantity.from_nanos(amount, limit.format)} used, hard {limit}")
    return over


def exceeded_condition(over: list[str]) -> tuple[str, str, str]:
    """(status, reason, message) of the Exceeded condition."""
    if not over:
        return "False", REASON_WITHIN, "usage is within every limit"
    return (
        "True",
        REASON_EXCEEDED,
        f"usage is over the limit ({'; '.join(over)}): no more devices of the class are "
        "allocated in this namespace until it is below; nothing already allocated is taken back",
    )


class QuotaStatusWriter:
    """Writes what the book says to the quotas' status (run by the allocation controller)."""

    def __init__(
        self,
        client: KubeClient,
        quotas: Any,  # the cache's DeviceQuota informer
        book: QuotaBook,
        read: Callable[[Callable[[], Any]], Any],  # runs a function where the book is stable
        events: Any = None,  # the runtime's EventRecorder: an Event when a quota goes over
    ) -> None:
        self.client = client
        self.events = events
        self.quotas = quotas
        self.book = book
        self.read = read
        self.seen_version = -1
        self.failed: set[Key] = set()

    def _statuses(self) -> dict[Key, QuotaStatus]:
        return {Key(q.namespace, q.name): self.book.status(q) for q in self.book.all_quotas()}

    async def run(self) -> None:
        while True:
            await asyncio.sleep(PERIOD)
            if self.book.version == self.seen_version and not self.failed:
                continue
            self.seen_version = self.book.version
            statuses: dict[Key, QuotaStatus] = await self.read(self._statuses)
            metrics.set_quota_usage(
                [
                    (key.namespace, key.name, resource, amount, hard)
                    for key, status in statuses.items()
                    for resource, amount, hard in self._figures(key, status)
                ]
            )
            self.failed.clear()
            for key, status in sorted(statuses.items()):
                quota = self.quotas.get(key)
                if quota is None:
                    continue
                try:
                    await self._write(quota, status)
                except Exception as error:
                    kind = failure_kind(error)
                    if kind is None:
                        raise
                    if kind is not FailureKind.STALE:
                        log.warning(
                            "quota status not written", quota=str(key), error=str(error)[:200]
                        )
                    self.failed.add(key)

    def _figures(self, key: Key, status: QuotaStatus) -> list[tuple[str, float, float]]:
        quota = self.quotas.get(key)
        if quota is None:
            return []
        hard = quota.spec.hard
        out: list[tuple[str, float, float]] = []
        if hard.devices is not None:
            out.append(("devices", status.used.devices, hard.devices))
        if hard.claims is not None:
            out.append(("claims", status.used.claims, hard.claims))
        for name, limit in sorted(hard.capacity.items()):
            out.append((name, status.used.capacity.get(name, 0) / 1e9, limit.nanos / 1e9))
        return out

    async def _write(self, quota: DeviceQuota, status: QuotaStatus) -> None:
        used = used_json(quota, status.used)
        current = quota.status.conditions if quota.status else ()
        state, reason, message = valid_condition(status)
        generation = quota.metadata.generation or 0
        updated = conditions.set_condition(
            current, CONDITION, state, reason, message, observed_generation=generation
        )
        # An invalid quota that limits nothing is over nothing either (Valid says why).
        enforced = status.invalid is None or status.blocking
        over = over_limits(quota, status.used) if enforced else []
        was_over = any(c.type == EXCEEDED and c.status == "True" for c in current)
        base = current if updated is None else tuple(Condition.from_kube(c) for c in updated)
        exceeded = conditions.set_condition(
            base,
            EXCEEDED,
            *(exceeded_condition(over) if enforced else NOT_ENFORCED),
            observed_generation=generation,
        )
        if exceeded is not None:
            updated = exceeded
        old_used = quota.status.used.to_kube() if quota.status and quota.status.used else None
        if updated is None and old_used == used:
            return
        patch: dict[str, Any] = {"status": {"used": used}}
        if updated is not None:
            patch["status"]["conditions"] = updated
        await self.client.merge_patch(
            DEVICE_QUOTAS,
            quota.metadata.name or "",
            patch,
            namespace=quota.metadata.namespace,
            resource_version=quota.metadata.resource_version,
            subresource="status",
        )
        if over and not was_over and self.events is not None:
            await self.events.post(
                conditions.event_target(quota),
                REASON_EXCEEDED,
                exceeded_condition(over)[2],
                warning=True,
            )
