"""Each DeviceTaintRule's ``EvictionInProgress`` condition, refreshed at most once per
``RULE_STATUS_PERIOD``.

A rule served at a version without status (in-tree v1alpha3 before Kubernetes 1.35) gets the
same reason and message as an Event on the rule instead, each change once, so that ``kubectl
describe`` still shows what the controller did with it. A rule with effect ``None`` is told what
it would do with NoExecute, once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from operators.api.models import DeviceTaintRule, ResourceClaim
from operators.cache.informer import Informer, Key
from operators.cache.kinds import has_status
from operators.controllers import conditions, taintrules
from operators.controllers.runtime import Runtime
from operators.controllers.taintrules import DeviceId, EffectiveTaint
from operators.controllers.taints.ledger import EvictionLedger
from operators.kube import DEVICE_TAINT_RULES, FailureKind, failure_kind

log = structlog.get_logger(__name__)

RULE_STATUS_PERIOD = 10.0
CONDITION = "EvictionInProgress"


class RuleStatus:
    def __init__(
        self,
        runtime: Runtime,
        rules: Informer[DeviceTaintRule],
        claims: Informer[ResourceClaim],
        ledger: EvictionLedger,
        taints: Callable[[], dict[DeviceId, list[EffectiveTaint]]],
    ) -> None:
        self.runtime = runtime
        self.client = runtime.client
        self.rules = rules
        self.claims = claims
        self.ledger = ledger
        self.taints = taints
        self.enabled = runtime.settings.feature_gates["DRADeviceTaintRules"]
        self.dirty: set[str] = set()
        self._written: dict[str, float] = {}
        self._reported: dict[str, tuple[str, str]] = {}  # uid -> (reason, message) posted
        self._status_served: dict[str, bool] = {}  # served version -> rules have a status

    def mark(self, rules: frozenset[str]) -> None:
        """These rules' conditions may say something else now."""
        self.dirty.update(rules)

    def mark_all(self) -> None:
        self.dirty.update(rule.metadata.name or "" for rule in self.rules.values())

    def forget(self, rule: DeviceTaintRule) -> None:
        """A deleted rule: what it was told goes with it."""
        self._reported.pop(rule.metadata.uid or "", None)

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            if not self.enabled:
                continue
            clock = time.monotonic()
            for name in sorted(self.dirty):
                last = self._written.get(name)
                if last is not None and clock - last < RULE_STATUS_PERIOD:
                    continue
                self.dirty.discard(name)
                rule = self.rules.get(Key("", name))
                if rule is None:
                    continue
                try:
                    if await self._write(rule):
                        self._written[name] = clock
                except Exception as error:
                    kind = failure_kind(error)
                    if kind is None:
                        raise
                    self.dirty.add(name)
                    if kind is not FailureKind.STALE:
                        # Unavailable or refused: try again after the usual period, not now.
                        self._written[name] = clock
                        log.warning("rule status not written", rule=name, error=str(error)[:200])

    def condition(self, rule: DeviceTaintRule) -> tuple[str, str, str]:
        """(status, reason, message) of the rule's condition now."""
        name = rule.metadata.name or ""
        pending = self.ledger.pending_for(name)
        simulation = None
        if rule.spec.taint.effect == "None":
            simulation = self._simulate(rule)
        return taintrules.rule_condition(
            rule,
            pending_pods=len(pending),
            pending_namespaces=len({key.namespace for key in pending}),
            evicted=self.ledger.evicted_by_rule[name],
            simulation=simulation,
            blocked=sum(1 for key in pending if key in self.ledger.refused),
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

    async def _write(self, rule: DeviceTaintRule) -> bool:
        status, reason, message = self.condition(rule)
        if not await self._rules_have_status():
            return await self._report_event(rule, reason, message)
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

    async def _report_event(self, rule: DeviceTaintRule, reason: str, message: str) -> bool:
        """The condition as an Event on the rule, where the rule has no status to hold it."""
        uid = rule.metadata.uid or ""
        previous = self._reported.get(uid)
        if previous == (reason, message) or (previous and previous[0] == reason == "NoEffect"):
            return False  # said already (the simulation, as on a status, only once)
        self._reported[uid] = (reason, message)
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
