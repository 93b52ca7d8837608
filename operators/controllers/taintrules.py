"""Pure rules of the device-taint eviction controller (docs/design.md "Upstream references").

Which taints a device has (the newest slice generation of its pool, plus matching
DeviceTaintRules), when a claim's pod must go (the earliest untolerated NoExecute deadline,
honouring the tolerations copied into the allocation result), and the messages of a
DeviceTaintRule's ``EvictionInProgress`` condition.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from operators.api.models import DeviceTaintRule, ResourceClaim, ResourceSlice

DeviceId = tuple[str, str, str]  # driver, pool, device
FOREVER = None


@dataclasses.dataclass(frozen=True)
class EffectiveTaint:
    key: str
    value: str
    effect: str
    time_added: datetime.datetime | None
    rule: str = ""  # the DeviceTaintRule it came from ('' = the slice)


def newest_slices(slices: Iterable[ResourceSlice]) -> list[ResourceSlice]:
    """Only the slices of each pool's highest generation count."""
    newest: dict[tuple[str, str], int] = {}
    items = list(slices)
    for slice_ in items:
        pool = (slice_.spec.driver, slice_.spec.pool.name)
        newest[pool] = max(newest.get(pool, -1), slice_.spec.pool.generation)
    return [s for s in items if s.spec.pool.generation == newest[(s.spec.driver, s.spec.pool.name)]]


def pool_of(slice_: ResourceSlice) -> tuple[str, str]:
    """The pool a slice publishes devices of: (driver, pool name)."""
    return slice_.spec.driver, slice_.spec.pool.name


def changed_devices(
    before: Mapping[DeviceId, list[EffectiveTaint]], after: Mapping[DeviceId, list[EffectiveTaint]]
) -> set[DeviceId]:
    """Devices whose effective taints differ (a device missing on one side has none)."""
    return {
        device
        for device in before.keys() | after.keys()
        if before.get(device, []) != after.get(device, [])
    }


def allocated_pools(claim: ResourceClaim) -> tuple[tuple[str, str], ...]:
    """The pools the claim's allocation took devices from (an index of claims)."""
    if claim.status is None or claim.status.allocation is None:
        return ()
    return tuple({(r.driver, r.pool) for r in claim.status.allocation.devices.results})


def rule_selects(rule: DeviceTaintRule, device: DeviceId) -> bool:
    """A nil selector selects nothing (as documented); an empty one selects everything."""
    selector = rule.spec.device_selector
    if selector is None:
        return False
    driver, pool, name = device
    return (
        (selector.driver is None or selector.driver == driver)
        and (selector.pool is None or selector.pool == pool)
        and (selector.device is None or selector.device == name)
    )


def device_taints(
    slices: Iterable[ResourceSlice], rules: Iterable[DeviceTaintRule]
) -> dict[DeviceId, list[EffectiveTaint]]:
    """Every published device with its effective taints (devices without taints included)."""
    rules = list(rules)
    table: dict[DeviceId, list[EffectiveTaint]] = {}
    for slice_ in newest_slices(slices):
        for device in slice_.spec.devices:
            device_id = (slice_.spec.driver, slice_.spec.pool.name, device.name)
            taints = [
                EffectiveTaint(t.key, t.value or "", t.effect, t.time_added) for t in device.taints
            ]
            for rule in rules:
                if rule_selects(rule, device_id):
                    taint = rule.spec.taint
                    added = taint.time_added or rule.metadata.creation_timestamp
                    taints.append(
                        EffectiveTaint(
                            taint.key,
                            taint.value or "",
                            taint.effect,
                            added,
                            rule.metadata.name or "",
                        )
                    )
            table[device_id] = taints
    return table


def tolerates(toleration: Mapping[str, Any], taint: EffectiveTaint) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if (toleration.get("operator") or "Equal") == "Exists":
        return not key or key == taint.key
    return key == taint.key and (toleration.get("value") or "") == taint.value


def taint_deadline(
    taint: EffectiveTaint, tolerations: Iterable[Mapping[str, Any]], now: datetime.datetime
) -> datetime.datetime | None:
    """When a NoExecute taint evicts, given the result's tolerations (None = never)."""
    if taint.effect != "NoExecute":
        return FOREVER
    added = taint.time_added or now
    matching = [t for t in tolerations if tolerates(t, taint)]
    if not matching:
        return added
    seconds: list[int] = []
    for toleration in matching:
        value = toleration.get("tolerationSeconds")
        if value is None or toleration.get("effect") != "NoExecute":
            return FOREVER  # tolerated without a time limit
        seconds.append(max(0, int(value)))
    return added + datetime.timedelta(seconds=min(seconds))


@dataclasses.dataclass(frozen=True)
class ClaimEviction:
    deadline: datetime.datetime
    rules: frozenset[str]  # DeviceTaintRules whose taints lead to it


def claim_eviction(
    claim: ResourceClaim,
    taints: Mapping[DeviceId, list[EffectiveTaint]],
    now: datetime.datetime,
) -> ClaimEviction | None:
    """The earliest deadline over the claim's allocated devices, if any taint evicts."""
    allocation = claim.status.allocation if claim.status else None
    if allocation is None:
        return None
    best: datetime.datetime | None = None
    rules: set[str] = set()
    for result in allocation.devices.results:
        tolerations = [t.to_kube() for t in result.tolerations]
        for taint in taints.get((result.driver, result.pool, result.device), ()):
            deadline = taint_deadline(taint, tolerations, now)
            if deadline is None:
                continue
            if taint.rule:
                rules.add(taint.rule)
            if best is None or deadline < best:
                best = deadline
    return ClaimEviction(best, frozenset(rules)) if best is not None else None


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def pending_message(pods: int, namespaces: int) -> str:
    verb = "needs" if pods == 1 else "need"
    where = "1 namespace" if namespaces == 1 else f"{namespaces} different namespaces"
    return f"{_plural(pods, 'pod', 'pods')} {verb} to be evicted in {where}."


def completed_message(evicted: int) -> str:
    return f"{_plural(evicted, 'pod', 'pods')} evicted since starting the controller."


def no_effect_message(published: int, allocated: int, pods: int, namespaces: int) -> str:
    return (
        f"{published} published devices selected. {allocated} allocated devices selected. "
        f"{pods} pods would be evicted in {namespaces} namespaces if the effect was NoExecute. "
        "This information will not be updated again. Recreate the DeviceTaintRule to trigger "
        "an update."
    )


def rule_condition(
    rule: DeviceTaintRule,
    *,
    pending_pods: int,
    pending_namespaces: int,
    evicted: int,
    simulation: tuple[int, int, int, int] | None = None,
    blocked: int = 0,
) -> tuple[str, str, str]:
    """(status, reason, message) of the rule's EvictionInProgress condition."""
    effect = rule.spec.taint.effect
    if effect == "None":
        assert simulation is not None
        return "False", "NoEffect", no_effect_message(*simulation)
    if effect != "NoExecute":
        return "False", "OtherEffect", "Eviction only happens for the NoExecute effect."
    if pending_pods:
        message = pending_message(pending_pods, pending_namespaces)
        if blocked:
            message += (
                f" {_plural(blocked, 'eviction', 'evictions')} refused by a disruption budget"
                f" (retrying); {completed_message(evicted)}"
            )
        return "True", "PodsPendingEviction", message
    return "False", "Completed", completed_message(evicted)
