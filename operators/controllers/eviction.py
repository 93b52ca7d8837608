"""Taking a pod off its devices: through the Eviction API, or as a marked deletion, and at a
limited rate.

Shared by the controllers that evict (the device-taint controller today): both ways act on the
pod's UID only, so a new pod of the same name is never the one that goes.

- :func:`evict_through_api` posts the pod's ``eviction`` subresource (policy/v1): the API server
  sets the pod's ``DisruptionTarget`` condition, and a PodDisruptionBudget may refuse
  (:class:`BudgetRefused`).
- :func:`delete_as_disruption` does what upstream's controllers do when they delete a pod for a
  reason of theirs: the ``DisruptionTarget`` condition with that reason first (the pod's
  controller and the Job API read it), then a delete with the UID precondition.
"""

from __future__ import annotations

import collections
import datetime
import time
from typing import Any

from operators.cache.core import Pod
from operators.controllers import conditions
from operators.kube import PODS, ApiError, KubeClient

DISRUPTION_TARGET = "DisruptionTarget"


class BudgetRefused(Exception):
    """The Eviction API refused: a PodDisruptionBudget does not allow the disruption now."""

    def __init__(self, budget: str) -> None:
        super().__init__(budget)
        self.budget = budget
        """The budget's own words (the API server's causes, else its message)."""


async def still_evictable(client: KubeClient, pod: Pod) -> bool:
    """Whether the pod read live is the same pod (UID) and not being deleted already: a pod
    gone, replaced or on its way out is left alone."""
    live = await client.get(PODS, pod.name, pod.namespace)
    metadata = live.get("metadata") or {}
    return metadata.get("uid") == pod.uid and not metadata.get("deletionTimestamp")


async def evict_through_api(client: KubeClient, pod: Pod) -> None:
    """POST the pod's eviction subresource; :class:`BudgetRefused` when a disruption budget
    refuses it, any other failure raises as it came (throttled, unavailable, ...)."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod.name, "namespace": pod.namespace},
        "deleteOptions": {"preconditions": {"uid": pod.uid}},
    }
    try:
        await client.request("POST", PODS.path(pod.namespace, pod.name, "eviction"), body=body)
    except ApiError as error:
        if not error.refused_by_disruption_budget:
            raise
        raise BudgetRefused("; ".join(error.causes) or error.message) from error


async def delete_as_disruption(
    client: KubeClient, pod: Pod, reason: str, message: str, now: datetime.datetime
) -> None:
    """The pod's ``DisruptionTarget`` condition with ``reason``, then its delete (UID)."""
    condition = conditions.condition(DISRUPTION_TARGET, "True", reason, message, transition=now)
    await client.request(
        "PATCH",
        PODS.path(pod.namespace, pod.name, "status"),
        body={"metadata": {"uid": pod.uid}, "status": {"conditions": [condition]}},
        content_type="application/strategic-merge-patch+json",
    )
    await client.delete(PODS, pod.name, namespace=pod.namespace, uid=pod.uid)


class EvictionRateLimiter:
    """At most ``per_minute`` evictions in any sliding minute (0 = no limit).

    A slot is taken before the eviction is tried (workers run at once, and each must see the
    others' slots) and given back when the eviction did not happen: a disruption budget
    refused it. Pods told to wait while slots were taken only by attempts then refused would
    otherwise wait a whole minute for nothing, so those told to wait are woken by each slot
    given back (:meth:`refund` returns them)."""

    def __init__(self, per_minute: int, clock: Any = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self.recent: collections.deque[float] = collections.deque()
        self.waiting: set[Any] = set()

    def take(self, waiter: Any = None) -> tuple[float, float]:
        """(seconds until another eviction is allowed, 0 = now, the slot taken). A ``waiter``
        told to wait is remembered, to be woken when a slot is given back."""
        if not self.per_minute:
            return 0.0, 0.0
        now = self.clock()
        while self.recent and now - self.recent[0] >= 60.0:
            self.recent.popleft()
        if len(self.recent) < self.per_minute:
            self.recent.append(now)
            self.waiting.discard(waiter)
            return 0.0, now
        if waiter is not None:
            self.waiting.add(waiter)
        return 60.0 - (now - self.recent[0]), 0.0

    def wait_time(self) -> float:
        """Seconds until another eviction is allowed (0 = now; then it is counted)."""
        return self.take()[0]

    def refund(self, slot: float | None = None) -> list[Any]:
        """The eviction of ``slot`` (default: the last) did not happen: it does not count.
        Returns the waiters to try again now."""
        if slot is not None and slot in self.recent:
            self.recent.remove(slot)
        elif slot is None and self.recent:
            self.recent.pop()
        woken = sorted(self.waiting, key=str)
        self.waiting.clear()
        return woken
