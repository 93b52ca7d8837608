"""The device-taint eviction controller's watches and eviction worker (upstream's
``devicetainteviction``; docs/design.md "Upstream references").

Pods whose allocated devices carry a NoExecute taint they do not tolerate are evicted: at once,
or when the shortest ``tolerationSeconds`` of the tolerations in the allocation result runs out.
A deadline is recomputed whenever the pod, its claims, the slices or the rules change, so
removing the taint or the reason cancels a pending eviction. Before evicting, the pod is read
live: a pod that is gone, being deleted, or a *new* pod of the same name (other UID) is left
alone; the eviction itself carries the UID precondition.

Beyond upstream, ``max_evictions_per_minute`` caps the rate, and with ``eviction_mode=evict``
pods go through the Eviction API (policy/v1), so PodDisruptionBudgets hold: a refused eviction
(429) is retried with backoff, the pod's Event names the budget and the rule's condition counts
the refused evictions beside the pending and done ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from typing import Any

import structlog

from operators import metrics
from operators.api.models import DeviceTaintRule, ResourceClaim, ResourceSlice
from operators.cache.core import POD_CLAIMS_INDEX, Pod
from operators.cache.informer import Change, Key
from operators.controllers import eviction as evicting
from operators.controllers import taintrules
from operators.controllers.eviction import BudgetRefused, EvictionRateLimiter
from operators.controllers.runtime import Runtime, register_controller, retry_forever
from operators.controllers.taintrules import ClaimEviction, DeviceId, EffectiveTaint
from operators.controllers.taints.ledger import EvictionLedger
from operators.controllers.taints.rulestatus import RuleStatus
from operators.controllers.workqueue import WorkQueue, run_workers
from operators.kube import (
    DEVICE_TAINT_RULES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ApiError,
    Conflict,
    NotFound,
)
from operators.settings import EvictionMode

log = structlog.get_logger(__name__)

SLICES_BY_POOL_INDEX = "slices-by-pool"
CLAIMS_BY_POOL_INDEX = "claims-by-allocated-pool"

REASON_EVICTION = "DeviceTaintManagerEviction"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class TaintController:
    name = "taints"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.client = runtime.client
        self.settings = runtime.settings
        cache = runtime.cache
        self.pods = cache[PODS]
        self.claims = cache[RESOURCE_CLAIMS]
        self.slices = cache[RESOURCE_SLICES]
        self.rules = cache[DEVICE_TAINT_RULES]
        self.rules_enabled = self.settings.feature_gates["DRADeviceTaintRules"]
        self.queue: WorkQueue[Key] = WorkQueue(base_delay=0.5, max_delay=60.0)
        self.limiter = EvictionRateLimiter(self.settings.max_evictions_per_minute)
        self.mode = self.settings.eviction_mode
        self.ledger = EvictionLedger()
        self._taints: dict[DeviceId, list[EffectiveTaint]] | None = None
        self.rule_status = RuleStatus(runtime, self.rules, self.claims, self.ledger, self.taints)
        self.pods.ensure_index(POD_CLAIMS_INDEX, Pod.claim_keys)
        self.slices.ensure_index(SLICES_BY_POOL_INDEX, lambda s: (taintrules.pool_of(s),))
        self.claims.ensure_index(CLAIMS_BY_POOL_INDEX, taintrules.allocated_pools)
        self.pods.add_handler(self._on_pod)
        self.claims.add_handler(self._on_claim)
        self.slices.add_handler(self._on_inventory)
        self.rules.add_handler(self._on_rule)

    # --- change tracking -------------------------------------------------------------------

    def taints(self) -> dict[DeviceId, list[EffectiveTaint]]:
        if self._taints is None:
            rules = self.rules.values() if self.rules_enabled else []
            self._taints = taintrules.device_taints(self.slices.values(), rules)
        return self._taints

    def _on_pod(self, change: Change[Pod]) -> None:
        pod = change.new or change.old
        if pod is not None and pod.claims:
            self.queue.add(change.key)

    def _on_claim(self, change: Change[ResourceClaim]) -> None:
        for key in self.pods.index_keys(POD_CLAIMS_INDEX, (change.key.namespace, change.key.name)):
            self.queue.add(key)

    def _on_inventory(self, change: Change[ResourceSlice]) -> None:
        """A slice changed: only its pool's devices can have other taints now (the newest
        generation of a pool hides the others'). Pods are queued again only where a device
        their claims hold got or lost a taint; a cluster's slices change far more often than
        their taints, and every pod on every slice change was quadratic at scale."""
        pools = {taintrules.pool_of(s) for s in (change.old, change.new) if s is not None}
        rules = self.rules.values() if self.rules_enabled else []
        for pool in pools:
            now = [
                s
                for key in self.slices.index_keys(SLICES_BY_POOL_INDEX, pool)
                if (s := self.slices.get(key)) is not None
            ]
            then = [s for s in now if s is not change.new]
            if change.old is not None and taintrules.pool_of(change.old) == pool:
                then.append(change.old)
            before = taintrules.device_taints(then, rules)
            after = taintrules.device_taints(now, rules)
            if self._taints is not None:
                for device in before:
                    self._taints.pop(device, None)
                self._taints.update(after)
            changed = taintrules.changed_devices(before, after)
            if changed or before.keys() != after.keys():
                self._pool_changed(pool, changed, before.keys() | after.keys())

    def _pool_changed(
        self, pool: tuple[str, str], changed: set[DeviceId], devices: set[DeviceId]
    ) -> None:
        """Queue the pods holding a device whose taints changed; the rules selecting any of
        the pool's devices may count other devices now (a rule without effect says what it
        would do)."""
        for claim_key in self.claims.index_keys(CLAIMS_BY_POOL_INDEX, pool):
            claim = self.claims.get(claim_key)
            if claim is None or claim.status is None or claim.status.allocation is None:
                continue
            held = {(r.driver, r.pool, r.device) for r in claim.status.allocation.devices.results}
            if held & changed:
                for key in self.pods.index_keys(
                    POD_CLAIMS_INDEX, (claim_key.namespace, claim_key.name)
                ):
                    self.queue.add(key)
        self.rule_status.mark(
            frozenset(
                rule.metadata.name or ""
                for rule in self.rules.values()
                if any(taintrules.rule_selects(rule, device) for device in devices)
            )
        )

    def _on_rule(self, change: Change[DeviceTaintRule]) -> None:
        self._taints = None
        if change.new is None and change.old is not None:
            self.rule_status.forget(change.old)
        self.rule_status.mark(frozenset({change.key.name}))
        self._requeue_all()

    def _requeue_all(self) -> None:
        for key, pod in self.pods.items():
            if pod.claims and pod.node_name:
                self.queue.add(key)
        self.rule_status.mark_all()

    # --- deciding --------------------------------------------------------------------------

    def eviction_for(self, pod: Pod, now: datetime.datetime) -> ClaimEviction | None:
        """The pod's eviction (earliest over its claims reserved for it), if any."""
        if not pod.node_name or pod.done or pod.deleting:
            return None
        best: ClaimEviction | None = None
        rules: set[str] = set()
        for entry in pod.claims:
            name = pod.claim_name(entry)
            claim = self.claims.get(Key(pod.namespace, name)) if name else None
            if claim is None or claim.status is None:
                continue
            if not any(r.uid == pod.uid for r in claim.status.reserved_for):
                continue
            found = taintrules.claim_eviction(claim, self.taints(), now)
            if found is None:
                continue
            rules |= found.rules
            if best is None or found.deadline < best.deadline:
                best = found
        return ClaimEviction(best.deadline, frozenset(rules)) if best else None

    # --- the loops -------------------------------------------------------------------------

    async def run(self) -> None:
        for key, pod in self.pods.items():
            if pod.claims:
                self.queue.add(key)
        self.rule_status.mark_all()
        async with asyncio.TaskGroup() as group:
            group.create_task(
                run_workers(
                    self.queue, self.sync, workers=self.settings.eviction_workers, name=self.name
                )
            )
            group.create_task(retry_forever("rule-status", self.rule_status.loop))

    def health(self) -> dict[str, Any]:
        return {"scheduled": len(self.ledger.scheduled), "evictions": self.ledger.evictions}

    async def sync(self, key: Key) -> None:
        pod = self.pods.get(key)
        now = _now()
        eviction = self.eviction_for(pod, now) if pod is not None else None
        previous = self.ledger.scheduled.get(key)
        if eviction is None or pod is None:
            self.ledger.refused.pop(key, None)
            self.limiter.waiting.discard(key)  # no longer waits for a slot
            if previous is not None:
                del self.ledger.scheduled[key]
                self.rule_status.mark(previous[1].rules)
                if pod is not None and pod.uid == previous[0] and not pod.deleting:
                    await self.runtime.events.post(
                        pod.involved(), REASON_EVICTION, "Cancelling deletion"
                    )
            return
        self.ledger.scheduled[key] = (pod.uid, eviction)
        if previous is None or previous[1] != eviction:
            self.rule_status.mark(eviction.rules)
        delay = (eviction.deadline - now).total_seconds()
        if delay > 0:
            self.queue.add_after(key, delay)
            return
        wait, slot = self.limiter.take(key)
        if wait > 0:
            self.queue.add_after(key, wait)
            return
        # Gone or replaced in the meantime: nothing to evict. Other failures raise, and the
        # work queue retries (with backoff, or late if refused).
        evicted = False
        try:
            with contextlib.suppress(Conflict, NotFound):
                evicted = await self.evict(pod, eviction, now)
        except BudgetRefused:
            self._give_back(slot)
            self.queue.retry(key)  # with this pod's backoff
            return
        except ApiError as error:
            # Refused (403 in a namespace being deleted, 429 from the server's priority and
            # fairness, ...): no eviction happened, so it uses no slot; else a few refused
            # retries fill the minute and pods that can go wait for nothing (seen in e2e: two
            # refused attempts in a terminating namespace held free pods 57 s). A 5xx, like
            # no answer at all, may come after the eviction was applied: the slot stays taken.
            if 400 <= error.status < 500:
                self._give_back(slot)
            raise
        if not evicted:  # gone, replaced or being deleted meanwhile: no slot used
            self._give_back(slot)
        self.ledger.refused.pop(key, None)
        self.queue.forget(key)

    def _give_back(self, slot: float) -> None:
        """An eviction that did not happen: its slot, and the pods waiting for one, now."""
        for waiter in self.limiter.refund(slot):
            self.queue.add(waiter)

    async def evict(self, pod: Pod, eviction: ClaimEviction, now: datetime.datetime) -> bool:
        """Whether the pod was evicted (False: gone, replaced or being deleted already)."""
        if not await evicting.still_evictable(self.client, pod):
            return False
        if self.mode is EvictionMode.EVICT:
            await self._evict_through_api(pod, eviction)
        else:
            await self.runtime.events.post(pod.involved(), REASON_EVICTION, "Marking for deletion")
            await evicting.delete_as_disruption(
                self.client,
                pod,
                "DeletionByDeviceTaintManager",
                "Device Taint manager: deleting due to NoExecute taint",
                now,
            )
        metrics.EVICTION_DELETIONS.inc()
        metrics.EVICTION_LATENCY.observe(max(0.0, (now - eviction.deadline).total_seconds()))
        self.ledger.evictions += 1
        for rule in eviction.rules:
            self.ledger.evicted_by_rule[rule] += 1
        self.rule_status.mark(eviction.rules)
        log.info("pod evicted for a device taint", pod=pod.ref, rules=sorted(eviction.rules))
        return True

    async def _evict_through_api(self, pod: Pod, eviction: ClaimEviction) -> None:
        """Through the Eviction API; a budget's refusal is told on the pod and raised."""
        try:
            await evicting.evict_through_api(self.client, pod)
        except BudgetRefused as refused:
            key = Key(pod.namespace, pod.name)
            if self.ledger.refused.get(key) != refused.budget:
                self.ledger.refused[key] = refused.budget
                self.rule_status.mark(eviction.rules)
            await self.runtime.events.post(
                pod.involved(),
                REASON_EVICTION,
                "Eviction refused by a disruption budget, retrying with backoff: " + refused.budget,
                warning=True,
            )
            log.info("eviction refused by a disruption budget", pod=pod.ref, budget=refused.budget)
            raise
        await self.runtime.events.post(pod.involved(), REASON_EVICTION, "Evicted")


register_controller(
    TaintController.name,
    lambda runtime: (
        TaintController(runtime)
        if runtime.settings.taints_controller and runtime.settings.feature_gates["DRADeviceTaints"]
        else None
    ),
)
