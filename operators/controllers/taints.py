"""The device-taint eviction controller (upstream's ``devicetainteviction``;
docs/design.md "Upstream references").

Pods whose allocated devices carry a NoExecute taint they do not tolerate are deleted: at
once, or when the shortest ``tolerationSeconds`` of the tolerations in the allocation result
runs out. A deadline is recomputed whenever the pod, its claims, the slices or the rules
change, so removing the taint or the reason cancels a pending eviction. Before deleting, the
pod is read live: a pod that is gone, being deleted, or a *new* pod of the same name (other
UID) is left alone; the delete itself carries the UID precondition.

Each DeviceTaintRule gets an ``EvictionInProgress`` condition, refreshed at most once per
10 s. A rule served at a version without status (in-tree v1alpha3, Kubernetes 1.33-1.35) gets
the same reason and message as an Event on the rule instead, each change once, so that
``kubectl describe`` still shows what the controller did with it. Beyond upstream,
``max_evictions_per_minute`` caps the deletion rate, and with ``eviction_mode=evict`` pods go
through the Eviction API (policy/v1), so PodDisruptionBudgets hold: a refused eviction (429) is
retried with backoff, the pod's Event names the budget and the rule's condition counts the
refused evictions beside the pending and done ones.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import time
from typing import Any

import structlog

from operators import metrics
from operators.api.models import DeviceTaintRule, ResourceClaim
from operators.cache.core import POD_CLAIMS_INDEX, Pod
from operators.cache.informer import Change, Key
from operators.cache.kinds import has_status
from operators.controllers import conditions, taintrules
from operators.controllers.runtime import Runtime, register_controller, retry_forever
from operators.controllers.taintrules import ClaimEviction, DeviceId, EffectiveTaint
from operators.controllers.workqueue import WorkQueue, run_workers
from operators.kube import (
    DEVICE_TAINT_RULES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ApiError,
    Conflict,
    FailureKind,
    NotFound,
    failure_kind,
)
from operators.settings import EvictionMode

log = structlog.get_logger(__name__)

RULE_STATUS_PERIOD = 10.0
CONDITION = "EvictionInProgress"
REASON_EVICTION = "DeviceTaintManagerEviction"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


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


class BudgetRefused(Exception):
    """The Eviction API refused: a PodDisruptionBudget does not allow the disruption now."""


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
        self.scheduled: dict[Key, tuple[str, ClaimEviction]] = {}  # pod -> (uid, eviction)
        self.evicted_by_rule: collections.Counter[str] = collections.Counter()
        self.mode = self.settings.eviction_mode
        self.refused: dict[Key, str] = {}  # pod -> the budget's words, while it refuses
        self.evictions = 0
        self._taints: dict[DeviceId, list[EffectiveTaint]] | None = None
        self._rules_dirty: set[str] = set()
        self._rule_written: dict[str, float] = {}
        self._rule_reported: dict[str, tuple[str, str]] = {}  # uid -> (reason, message) posted
        self._status_served: dict[str, bool] = {}  # served version -> rules have a status
        self.pods.ensure_index(POD_CLAIMS_INDEX, Pod.claim_keys)
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

    def _on_inventory(self, change: Change[Any]) -> None:
        self._taints = None
        self._requeue_all()

    def _on_rule(self, change: Change[DeviceTaintRule]) -> None:
        self._taints = None
        if change.new is None and change.old is not None:
            self._rule_reported.pop(change.old.metadata.uid or "", None)
        self._rules_dirty.add(change.key.name)
        self._requeue_all()

    def _requeue_all(self) -> None:
        for key, pod in self.pods.items():
            if pod.claims and pod.node_name:
                self.queue.add(key)
        self._rules_dirty.update(rule.metadata.name or "" for rule in self.rules.values())

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
        self._rules_dirty.update(rule.metadata.name or "" for rule in self.rules.values())
        async with asyncio.TaskGroup() as group:
            group.create_task(
                run_workers(
                    self.queue, self.sync, workers=self.settings.eviction_workers, name=self.name
                )
            )
            group.create_task(retry_forever("rule-status", self._rule_status_loop))

    def health(self) -> dict[str, Any]:
        return {"scheduled": len(self.scheduled), "evictions": self.evictions}

    async def sync(self, key: Key) -> None:
        pod = self.pods.get(key)
        now = _now()
        eviction = self.eviction_for(pod, now) if pod is not None else None
        previous = self.scheduled.get(key)
        if eviction is None or pod is None:
            self.refused.pop(key, None)
            self.limiter.waiting.discard(key)  # no longer waits for a slot
            if previous is not None:
                del self.scheduled[key]
                self._mark_rules(previous[1].rules)
                if pod is not None and pod.uid == previous[0] and not pod.deleting:
                    await self.runtime.events.post(
                        pod.involved(), REASON_EVICTION, "Cancelling deletion"
                    )
            return
        self.scheduled[key] = (pod.uid, eviction)
        if previous is None or previous[1] != eviction:
            self._mark_rules(eviction.rules)
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
        self.refused.pop(key, None)
        self.queue.forget(key)

    def _give_back(self, slot: float) -> None:
        """An eviction that did not happen: its slot, and the pods waiting for one, now."""
        for waiter in self.limiter.refund(slot):
            self.queue.add(waiter)

    async def evict(self, pod: Pod, eviction: ClaimEviction, now: datetime.datetime) -> bool:
        """Whether the pod was evicted (False: gone, replaced or being deleted already)."""
        live = await self.client.get(PODS, pod.name, pod.namespace)
        metadata = live.get("metadata") or {}
        if metadata.get("uid") != pod.uid or metadata.get("deletionTimestamp"):
            return False
        if self.mode is EvictionMode.EVICT:
            await self._evict_through_api(pod, eviction)
        else:
            await self._delete(pod, now)
        metrics.EVICTION_DELETIONS.inc()
        metrics.EVICTION_LATENCY.observe(max(0.0, (now - eviction.deadline).total_seconds()))
        self.evictions += 1
        for rule in eviction.rules:
            self.evicted_by_rule[rule] += 1
        self._mark_rules(eviction.rules)
        log.info("pod evicted for a device taint", pod=pod.ref, rules=sorted(eviction.rules))
        return True

    async def _evict_through_api(self, pod: Pod, eviction: ClaimEviction) -> None:
        """POST the pod's eviction subresource (the API server sets DisruptionTarget)."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {"preconditions": {"uid": pod.uid}},
        }
        try:
            await self.client.request(
                "POST", PODS.path(pod.namespace, pod.name) + "/eviction", body=body
            )
        except ApiError as error:
            if not error.refused_by_disruption_budget:
                raise  # throttled or failed: retried with backoff, not told as a budget's
            budget = "; ".join(error.causes) or error.message
            key = Key(pod.namespace, pod.name)
            if self.refused.get(key) != budget:
                self.refused[key] = budget
                self._mark_rules(eviction.rules)
            await self.runtime.events.post(
                pod.involved(),
                REASON_EVICTION,
                f"Eviction refused by a disruption budget, retrying with backoff: {budget}",
                warning=True,
            )
            log.info("eviction refused by a disruption budget", pod=pod.ref, budget=budget)
            raise BudgetRefused(budget) from error
        await self.runtime.events.post(pod.involved(), REASON_EVICTION, "Evicted")

    async def _delete(self, pod: Pod, now: datetime.datetime) -> None:
        """As upstream: the DisruptionTarget condition, then a delete with the UID."""
        await self.runtime.events.post(pod.involved(), REASON_EVICTION, "Marking for deletion")
        condition = conditions.condition(
            "DisruptionTarget",
            "True",
            "DeletionByDeviceTaintManager",
            "Device Taint manager: deleting due to NoExecute taint",
            transition=now,
        )
        await self.client.request(
            "PATCH",
            PODS.path(pod.namespace, pod.name) + "/status",
            body={"metadata": {"uid": pod.uid}, "status": {"conditions": [condition]}},
            content_type="application/strategic-merge-patch+json",
        )
        await self.client.delete(PODS, pod.name, namespace=pod.namespace, uid=pod.uid)

    # --- DeviceTaintRule status ------------------------------------------------------------

    def _mark_rules(self, rules: frozenset[str]) -> None:
        self._rules_dirty.update(rules)

    async def _rule_status_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            if not self.rules_enabled:
                continue
            clock = time.monotonic()
            for name in sorted(self._rules_dirty):
                last = self._rule_written.get(name)
                if last is not None and clock - last < RULE_STATUS_PERIOD:
                    continue
                self._rules_dirty.discard(name)
                rule = self.rules.get(Key("", name))
                if rule is None:
                    continue
                try:
                    if await self._write_rule_status(rule):
                        self._rule_written[name] = clock
                except Exception as error:
                    kind = failure_kind(error)
                    if kind is None:
                        raise
                    self._rules_dirty.add(name)
                    if kind is not FailureKind.STALE:
                        # Unavailable or refused: try again after the usual period, not now.
                        self._rule_written[name] = clock
                        log.warning("rule status not written", rule=name, error=str(error)[:200])

    def rule_condition(self, rule: DeviceTaintRule) -> tuple[str, str, str]:
        name = rule.metadata.name or ""
        pending = [key for key, (_, eviction) in self.scheduled.items() if name in eviction.rules]
        simulation = None
        if rule.spec.taint.effect == "None":
            simulation = self._simulate(rule)
        return taintrules.rule_condition(
            rule,
            pending_pods=len(pending),
            pending_namespaces=len({key.namespace for key in pending}),
            evicted=self.evicted_by_rule[name],
            simulation=simulation,
            blocked=sum(1 for key in pending if key in self.refused),
        )

    def _simulate(self, rule: DeviceTaintRule) -> tuple[int, int, int, int]:
        """What the rule would do with effect NoExecute (the NoEffect message)."""
        selected = {d for d in self.taints() if taintrules.rule_selects(rule, d)}
        allocated: set[DeviceId] = set()
        pods: set[Key] = set()
        for claim in self.claims.values():
            if claim.status is None or claim.status.allocation is None:
                continue
            hit = {
                (r.driver, r.pool, r.device) for r in claim.status.allocation.devices.results
            } & selected
            if not hit:
                continue
            allocated |= hit
            for consumer in claim.status.reserved_for:
                if consumer.resource == "pods":
                    pods.add(Key(claim.metadata.namespace or "", consumer.name))
        return len(selected), len(allocated), len(pods), len({k.namespace for k in pods})

    async def _write_rule_status(self, rule: DeviceTaintRule) -> bool:
        status, reason, message = self.rule_condition(rule)
        if not await self._rules_have_status():
            return await self._report_rule_event(rule, reason, message)
        current = rule.status.conditions if rule.status else ()
        existing = conditions.find(current, CONDITION)
        if existing is not None and existing.reason == "NoEffect" and reason == "NoEffect":
            return False  # the simulation is reported once per rule
        updated = conditions.set_condition(
            current,
            CONDITION,
            status,
            reason,
            message,
            observed_generation=rule.metadata.generation or 0,
        )
        if updated is None:
            return False
        await self.client.merge_patch(
            self.rules.served,  # the version the server serves them at (v1beta2 in 1.36)
            rule.metadata.name or "",
            {"status": {"conditions": updated}},
            resource_version=rule.metadata.resource_version,
            subresource="status",
        )
        return True

    async def _rules_have_status(self) -> bool:
        """Whether rules at the served version have a status to hold the condition.

        Discovery says (in-tree v1alpha3 rules got a status subresource in Kubernetes 1.35,
        behind the version dralloc reads them at); where it cannot, the versions known to
        have none (kinds.WITHOUT_STATUS) decide."""
        served = self.rules.served
        known = self._status_served.get(served.version)
        if known is None:
            known = await self.client.serves_subresource(served, "status")
            if known is None:
                return has_status(DEVICE_TAINT_RULES, served.version)
            self._status_served[served.version] = known
        return known

    async def _report_rule_event(self, rule: DeviceTaintRule, reason: str, message: str) -> bool:
        """The condition as an Event on the rule, where the rule has no status to hold it."""
        uid = rule.metadata.uid or ""
        previous = self._rule_reported.get(uid)
        if previous == (reason, message) or (previous and previous[0] == reason == "NoEffect"):
            return False  # said already (the simulation, as on a status, only once)
        self._rule_reported[uid] = (reason, message)
        served = self.rules.served
        involved = {
            "apiVersion": self.client.resolve(served).api_version,
            "kind": served.kind,
            "metadata": {
                "name": rule.metadata.name,
                "uid": uid,
                "resourceVersion": rule.metadata.resource_version,
            },
        }
        await self.runtime.events.post(involved, reason, message)
        return True


register_controller(
    TaintController.name,
    lambda runtime: (
        TaintController(runtime)
        if runtime.settings.taints_controller and runtime.settings.feature_gates["DRADeviceTaints"]
        else None
    ),
)
