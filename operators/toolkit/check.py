"""Invariants of a DRA cluster, checked on a snapshot: the safety net under every fault test.

The allocator is built to never hand out a device twice and never lose a claim; this module
checks the outcome independently of the allocator's own bookkeeping, straight from the
objects (claims, slices, pods), so a bug in the allocator's indexes cannot hide itself.
It is used by the fault and bad-input e2e tests and by ``dralloc check`` (files or a live
cluster read with list calls only).

Rules (names are stable; tests and users grep for them):

- ``device-allocated-twice``: a device is in two allocations (or twice in one), except
  adminAccess results, and shares of a device that allows multiple allocations;
- ``capacity-exceeded``: the shares of a multi-allocatable device consume more of a capacity
  than the device publishes, or a capacity it does not publish;
- ``counters-exceeded``: allocated partitionable devices of a pool consume more of a shared
  counter than the pool's counter sets publish (a device pays once, however many shares);
- ``reserved-for-missing-pod``: a claim is reserved for a pod that does not exist, or for a
  pod of that name with another UID (a deleted and re-created pod);
- ``allocated-without-finalizer``: an allocated claim lacks the delete-protection finalizer,
  so deleting it could free devices a pod still uses;
- ``gated-pod-claim-missing``: a pod waiting at the allocation gate refers to a claim (by
  name, or generated and recorded in its claim statuses) that does not exist;
- ``devices-annotation-mismatch``: a pod's ``resource.dralloc.dev/devices`` annotation says
  something its claims do not: devices of a claim that is not the pod's own (a generated claim
  of another pod), not allocated, or not reserved for the pod, other devices than the claim's
  allocation, or no entry for a claim that is allocated for the pod. The claims are the truth
  (docs/design.md "Trust"); the operator rewrites such an annotation, this names it;
- ``invalid-selector``: a class, claim or template has a selector the API server would refuse
  (in-tree it refuses it at create; dralloc's webhook does for its CRDs): objects read from
  files are new ones, compiled as new expressions with the given feature gates (compile and
  type errors, the cost limit); objects read from a cluster are stored ones, compiled as the
  allocator compiles them (every field declared, no cost check), so only what can never
  be evaluated is named;
- ``bound-pod-claim-not-reserved`` (opt-in, for settled clusters): a running pod bound to a
  node whose claims are missing, unallocated, or not reserved for it.

Transient states of a healthy operator (a template claim not generated yet, a pod not yet
reserved while gated) are not violations; the opt-in rule is for a cluster at rest.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from operators.api import DeviceClass, Quantity, ResourceClaim, ResourceSlice
from operators.api.annotations import (
    DEVICES_ANNOTATION,
    AnnotationError,
    parse_pod_devices,
)
from operators.api.models import Device
from operators.api.podprotocol import DRALLOC, PROTOCOLS
from operators.cache.core import Pod
from operators.cel import CELError, compile_selector
from operators.cel.admission import Checked, derived_paths, refused_selectors, selector_paths
from operators.cel.derived import compile_derived
from operators.toolkit.snapshot import Snapshot, build_snapshot
from operators.toolkit.sources import RawObject

DEVICE_ALLOCATED_TWICE: Final = "device-allocated-twice"
CAPACITY_EXCEEDED: Final = "capacity-exceeded"
COUNTERS_EXCEEDED: Final = "counters-exceeded"
RESERVED_FOR_MISSING_POD: Final = "reserved-for-missing-pod"
ALLOCATED_WITHOUT_FINALIZER: Final = "allocated-without-finalizer"
GATED_POD_CLAIM_MISSING: Final = "gated-pod-claim-missing"
DEVICES_ANNOTATION_MISMATCH: Final = "devices-annotation-mismatch"
BOUND_POD_CLAIM_NOT_RESERVED: Final = "bound-pod-claim-not-reserved"
INVALID_SELECTOR: Final = "invalid-selector"

DEFAULT_RULES: Final = (
    DEVICE_ALLOCATED_TWICE,
    CAPACITY_EXCEEDED,
    COUNTERS_EXCEEDED,
    RESERVED_FOR_MISSING_POD,
    ALLOCATED_WITHOUT_FINALIZER,
    GATED_POD_CLAIM_MISSING,
    DEVICES_ANNOTATION_MISMATCH,
    INVALID_SELECTOR,
)
ALL_RULES: Final = (*DEFAULT_RULES, BOUND_POD_CLAIM_NOT_RESERVED)

DeviceId = tuple[str, str, str]
"""(driver, pool, device)."""
PoolKey = tuple[str, str]
"""(driver, pool)."""


@dataclass(frozen=True)
class Violation:
    """One broken invariant: which rule, about which object, and what exactly is wrong."""

    rule: str
    subject: str
    """The object to look at, e.g. ``ResourceClaim ns/name`` or ``device drv/pool/dev``."""
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.subject}: {self.message}"


@dataclass(frozen=True)
class CheckReport:
    """Violations found, what was looked at, and rules that could not be checked."""

    violations: tuple[Violation, ...]
    checked: Mapping[str, int]
    """Rule -> number of items it examined (claims, devices, pods, counters)."""
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Rule -> why it was not checked."""
    unreadable: tuple[str, ...] = ()
    """Objects left out because they do not parse (see ``tolerant_snapshot``)."""

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_rule(self, rule: str) -> list[Violation]:
        return [v for v in self.violations if v.rule == rule]


@dataclass(frozen=True)
class SelectorMode:
    """How ``invalid-selector`` compiles: new objects as admission does, stored ones as the
    allocator does. The flags are the DRAListTypeAttributes and DRAConsumableCapacity gates."""

    stored: bool = False
    list_attributes: bool = False
    consumable_capacity: bool = True


@dataclass(frozen=True)
class _Use:
    """One allocation result naming a device."""

    claim: str
    request: str
    share_id: str | None
    admin: bool
    consumed: Mapping[str, Quantity]


# -- entry point -------------------------------------------------------------------------------


def tolerant_snapshot(objects: Sequence[RawObject]) -> tuple[Snapshot, tuple[str, ...]]:
    """A snapshot of the objects that parse, and why the others were left out.

    A cluster under test holds bad input on purpose (a pod with a malformed claims
    annotation); checking the rest must still be possible. Only the objects that fail on
    their own are dropped, each with its error.
    """
    problems: list[str] = []
    snapshot = build_snapshot(objects, on_invalid=lambda error: problems.append(str(error)))
    return snapshot, tuple(problems)


def check_snapshot(
    snapshot: Snapshot,
    rules: Iterable[str] = DEFAULT_RULES,
    *,
    pods_complete: bool | None = None,
    unreadable: Sequence[str] = (),
    selectors: SelectorMode = SelectorMode(),
) -> CheckReport:
    """Check the given rules on a snapshot (``selectors``: see :class:`SelectorMode`).

    ``pods_complete`` says whether the snapshot holds every pod of the cluster (True for a
    live read). When None, a snapshot without any Pod object is taken to be a partial one
    and the pod rules are skipped with that reason rather than reporting every reservation.
    """
    wanted = tuple(dict.fromkeys(rules))
    unknown = [r for r in wanted if r not in ALL_RULES]
    if unknown:
        raise ValueError(f"unknown rule(s) {unknown}; known: {list(ALL_RULES)}")
    if pods_complete is None:
        pods_complete = bool(snapshot.pods)
    violations: list[Violation] = []
    checked: dict[str, int] = {}
    skipped: dict[str, str] = {}
    devices = _DeviceIndex(snapshot.resource_slices.values())
    uses = _device_uses(snapshot.claims)
    pod_rules = {RESERVED_FOR_MISSING_POD, BOUND_POD_CLAIM_NOT_RESERVED}
    for rule in wanted:
        if rule in pod_rules and not pods_complete:
            skipped[rule] = "the snapshot holds no Pod objects"
            continue
        if rule == INVALID_SELECTOR:
            found, count = _invalid_selectors(snapshot, selectors)
        else:
            found, count = _RULES[rule](snapshot, devices, uses)
        violations.extend(found)
        checked[rule] = count
    return CheckReport(tuple(violations), checked, skipped, tuple(unreadable))


def check_cluster(
    kubeconfig: str | None = None,
    rules: Iterable[str] = DEFAULT_RULES,
    *,
    context: str | None = None,
    group: str | None = None,
) -> CheckReport:
    """Check a live cluster, read with list calls only (no watch, no write)."""
    from operators.toolkit.live import read_cluster

    snapshot, unreadable = tolerant_snapshot(read_cluster(kubeconfig, context, group))
    return check_snapshot(
        snapshot,
        rules,
        pods_complete=True,
        unreadable=unreadable,
        selectors=SelectorMode(stored=True),
    )


# -- device index ------------------------------------------------------------------------------


class _DeviceIndex:
    """Devices and counter sets of each pool, from the slices of its newest generation."""

    def __init__(self, slices: Iterable[ResourceSlice]) -> None:
        newest: dict[PoolKey, int] = {}
        by_pool: dict[PoolKey, list[ResourceSlice]] = defaultdict(list)
        for slice_ in slices:
            key = (slice_.spec.driver, slice_.spec.pool.name)
            generation = slice_.spec.pool.generation
            if generation > newest.get(key, -1):
                newest[key] = generation
                by_pool[key] = []
            if generation == newest[key]:
                by_pool[key].append(slice_)
        self.devices: dict[DeviceId, Device] = {}
        self.counter_sets: dict[PoolKey, dict[str, dict[str, Quantity]]] = {}
        for key, pool_slices in by_pool.items():
            sets: dict[str, dict[str, Quantity]] = {}
            for slice_ in sorted(pool_slices, key=lambda s: s.metadata.name or ""):
                for device in slice_.spec.devices:
                    self.devices.setdefault((*key, device.name), device)
                for counter_set in slice_.spec.shared_counters:
                    sets.setdefault(
                        counter_set.name,
                        {name: c.value for name, c in counter_set.counters.items()},
                    )
            self.counter_sets[key] = sets


def _qualified(driver: str, name: str) -> str:
    """Capacity names without a domain belong to the device's driver."""
    return name if "/" in name else f"{driver}/{name}"


def _device_uses(claims: Mapping[str, ResourceClaim]) -> dict[DeviceId, list[_Use]]:
    uses: dict[DeviceId, list[_Use]] = defaultdict(list)
    for key in sorted(claims):
        status = claims[key].status
        allocation = status.allocation if status else None
        if allocation is None:
            continue
        for result in allocation.devices.results:
            uses[result.device_id].append(
                _Use(
                    claim=key,
                    request=result.request,
                    share_id=result.share_id,
                    admin=bool(result.admin_access),
                    consumed={
                        _qualified(result.driver, k): v for k, v in result.consumed_capacity.items()
                    },
                )
            )
    return uses


def _device_name(device_id: DeviceId) -> str:
    return "device " + "/".join(device_id)


def _claim_name(key: str) -> str:
    return f"ResourceClaim {key}"


# -- rules -------------------------------------------------------------------------------------

_Found = tuple[list[Violation], int]


def _devices_twice(
    snapshot: Snapshot, devices: _DeviceIndex, uses: Mapping[DeviceId, list[_Use]]
) -> _Found:
    found: list[Violation] = []
    for device_id in sorted(uses):
        counted = [u for u in uses[device_id] if not u.admin]
        exclusive = [u for u in counted if u.share_id is None]
        shared = [u for u in counted if u.share_id is not None]
        where = _device_name(device_id)
        holders = ", ".join(f"{u.claim} (request {u.request})" for u in counted)
        if len(exclusive) > 1:
            found.append(Violation(DEVICE_ALLOCATED_TWICE, where, f"allocated to {holders}"))
        elif exclusive and shared:
            found.append(
                Violation(
                    DEVICE_ALLOCATED_TWICE, where, f"allocated exclusively and shared: {holders}"
                )
            )
        if shared:
            device = devices.devices.get(device_id)
            if device is not None and not device.allow_multiple_allocations:
                found.append(
                    Violation(
                        DEVICE_ALLOCATED_TWICE,
                        where,
                        "shared (results with shareID) but the device does not allow "
                        f"multiple allocations: {holders}",
                    )
                )
            share_ids = [u.share_id for u in shared]
            repeated = sorted({s for s in share_ids if s is not None and share_ids.count(s) > 1})
            if repeated:
                found.append(
                    Violation(
                        DEVICE_ALLOCATED_TWICE, where, f"share {repeated[0]} is allocated twice"
                    )
                )
    return found, len(uses)


def _capacity(
    snapshot: Snapshot, devices: _DeviceIndex, uses: Mapping[DeviceId, list[_Use]]
) -> _Found:
    found: list[Violation] = []
    examined = 0
    for device_id in sorted(uses):
        shared = [u for u in uses[device_id] if u.share_id is not None and not u.admin]
        device = devices.devices.get(device_id)
        if not shared or device is None:
            continue  # nothing shared, or the device is gone: nothing to compare with
        examined += 1
        published = {_qualified(device_id[0], k): c.value for k, c in device.capacity.items()}
        totals: dict[str, Quantity] = {}
        for use in shared:
            for name, amount in use.consumed.items():
                totals[name] = totals[name] + amount if name in totals else amount
        for name in sorted(totals):
            if name not in published:
                found.append(
                    Violation(
                        CAPACITY_EXCEEDED,
                        _device_name(device_id),
                        f"shares consume capacity {name}, which the device does not publish",
                    )
                )
            elif totals[name] > published[name]:
                found.append(
                    Violation(
                        CAPACITY_EXCEEDED,
                        _device_name(device_id),
                        f"capacity {name}: {len(shared)} shares consume {totals[name]}, "
                        f"the device has {published[name]}",
                    )
                )
    return found, examined


def _counters(
    snapshot: Snapshot, devices: _DeviceIndex, uses: Mapping[DeviceId, list[_Use]]
) -> _Found:
    consumed: dict[tuple[str, str, str, str], Quantity] = {}
    for device_id in sorted(uses):
        if all(u.admin for u in uses[device_id]):
            continue  # admin access does not take the device, so it pays no counters
        device = devices.devices.get(device_id)
        if device is None:
            continue
        for consumption in device.consumes_counters:
            for counter, amount in consumption.counters.items():
                key = (device_id[0], device_id[1], consumption.counter_set, counter)
                consumed[key] = consumed[key] + amount.value if key in consumed else amount.value
    found: list[Violation] = []
    for driver, pool, set_name, counter in sorted(consumed):
        published = devices.counter_sets.get((driver, pool), {}).get(set_name, {})
        total = consumed[(driver, pool, set_name, counter)]
        where = f"pool {driver}/{pool}"
        if counter not in published:
            found.append(
                Violation(
                    COUNTERS_EXCEEDED,
                    where,
                    f"allocated devices consume counter {set_name}/{counter}, "
                    "which the pool does not publish",
                )
            )
        elif total > published[counter]:
            found.append(
                Violation(
                    COUNTERS_EXCEEDED,
                    where,
                    f"counter {set_name}/{counter}: allocated devices consume {total}, "
                    f"the pool has {published[counter]}",
                )
            )
    return found, len(consumed)


def _reserved_for(
    snapshot: Snapshot, devices: _DeviceIndex, uses: Mapping[DeviceId, list[_Use]]
) -> _Found:
    found: list[Violation] = []
    examined = 0
    for key in sorted(snapshot.claims):
        claim = snapshot.claims[key]
        if claim.status is None:
            continue
        namespace = key.split("/", 1)[0]
        for consumer in claim.status.reserved_for:
            if consumer.resource != "pods" or (consumer.api_group or "") != "":
                continue  # only pods are checked; other consumers are someone else's business
            examined += 1
            pod = snapshot.pods.get(f"{namespace}/{consumer.name}")
            if pod is None:
                found.append(
                    Violation(
                        RESERVED_FOR_MISSING_POD,
                        _claim_name(key),
                        f"reserved for pod {consumer.name} (uid {consumer.uid}), "
                        "which does not exist",
                    )
                )
            elif pod.uid != consumer.uid:
                found.append(
                    Violation(
                        RESERVED_FOR_MISSING_POD,
                        _claim_name(key),
                        f"reserved for pod {consumer.name} with uid {consumer.uid}, "
                        f"but that pod now has uid {pod.uid}",
                    )
                )
    return found, examined


def _finalizers(
    snapshot: Snapshot, devices: _DeviceIndex, uses: Mapping[DeviceId, list[_Use]]
) -> _Found:
    found: list[Violation] = []
    examined = 0
    for key in sorted(snapshot.claims):
        claim = snapshot.claims[key]
        if claim.status is None or claim.status.allocation is None:
            continue
        examined += 1
        wanted = PROTOCOLS.get(claim.api_version.split("/")[0], DRALLOC).finalizer
        if wanted not in (claim.metadata.finalizers or ()):
            found.append(
                Violation(
                    ALLOCATED_WITHOUT_FINALIZER,
                    _claim_name(key),
                    f"allocated but without the finalizer {wanted}",
                )
            )
    return found, examined


def _gated_pods(
    snapshot: Snapshot, devices: _DeviceIndex, uses: Mapping[DeviceId, list[_Use]]
) -> _Found:
    found: list[Violation] = []
    examined = 0
    for key in sorted(snapshot.pods):
        pod = snapshot.pods[key]
        if not pod.gated or not pod.active:
            continue
        examined += 1
        for entry in pod.claims:
            name = pod.claim_name(entry)
            if name is None:
                continue  # a template claim not generated yet: the claim controller's turn
            if f"{pod.namespace}/{name}" not in snapshot.claims:
                how = "named" if entry.resource_claim_name else "generated"
                found.append(
                    Violation(
                        GATED_POD_CLAIM_MISSING,
                        f"Pod {key}",
                        f"claim entry {entry.name}: {how} claim {name} does not exist",
                    )
                )
    return found, examined


def _bound_pods(
    snapshot: Snapshot, devices: _DeviceIndex, uses: Mapping[DeviceId, list[_Use]]
) -> _Found:
    found: list[Violation] = []
    examined = 0
    for key in sorted(snapshot.pods):
        pod = snapshot.pods[key]
        if pod.gated or not pod.active or not pod.node_name or not pod.claims:
            continue
        examined += 1
        for entry in pod.claims:
            name = pod.claim_name(entry)
            problem = ""
            claim = snapshot.claims.get(f"{pod.namespace}/{name}") if name else None
            if name is None:
                problem = "has no generated claim"
            elif claim is None:
                problem = f"claim {name} does not exist"
            elif claim.status is None or claim.status.allocation is None:
                problem = f"claim {name} is not allocated"
            elif all(r.uid != pod.uid for r in claim.status.reserved_for):
                problem = f"claim {name} is not reserved for the pod (uid {pod.uid})"
            if problem:
                found.append(
                    Violation(
                        BOUND_POD_CLAIM_NOT_RESERVED,
                        f"Pod {key}",
                        f"bound to {pod.node_name}, claim entry {entry.name}: {problem}",
                    )
                )
    return found, examined


def _devices_annotations(
    snapshot: Snapshot, devices: _DeviceIndex, uses: Mapping[DeviceId, list[_Use]]
) -> _Found:
    found: list[Violation] = []
    examined = 0
    for key in sorted(snapshot.pods):
        pod = snapshot.pods[key]
        if DEVICES_ANNOTATION not in pod.annotations or not pod.active:
            continue
        examined += 1
        for problem in _annotation_problems(snapshot, pod):
            found.append(Violation(DEVICES_ANNOTATION_MISMATCH, f"Pod {key}", problem))
    return found, examined


def _annotation_problems(snapshot: Snapshot, pod: Pod) -> list[str]:
    """How a pod's devices annotation disagrees with its claims (empty: it agrees)."""
    try:
        listed = {
            item.name: item for item in parse_pod_devices(pod.annotations.get(DEVICES_ANNOTATION))
        }
    except AnnotationError as error:
        return [f"annotation {DEVICES_ANNOTATION} is not valid: {'; '.join(error.problems)}"]
    problems: list[str] = []
    for entry in pod.claims:
        item = listed.pop(entry.name, None)
        name = pod.claim_name(entry)
        claim = snapshot.claims.get(f"{pod.namespace}/{name}") if name else None
        if claim is None:
            problem = f"claim {name} does not exist" if name else "has no claim"
        elif entry.resource_claim_template_name is not None and not _owned_by(claim, pod.uid):
            problem = f"claim {name} was not generated for this pod (another pod owns it)"
        elif claim.status is None or claim.status.allocation is None:
            problem = f"claim {name} is not allocated"
        elif all(r.uid != pod.uid for r in claim.status.reserved_for):
            problem = f"claim {name} is not reserved for the pod (uid {pod.uid})"
        else:
            problem = ""
        where = f"claim entry {entry.name}"
        if item is None:
            if not problem:
                problems.append(f"{where}: claim {name} is allocated for the pod, but the "
                                "annotation does not list it")  # fmt: skip
            continue
        if problem:
            problems.append(f"{where}: the annotation lists devices, but {problem}")
            continue
        assert claim is not None and claim.status is not None
        assert claim.status.allocation is not None
        if item.resource_claim_name != name:
            problems.append(
                f"{where}: the annotation names claim {item.resource_claim_name}, "
                f"the pod's claim is {name}"
            )
            continue
        said = sorted(
            (d.request, f"{d.driver}/{d.pool}/{d.device}", d.share_id or "") for d in item.devices
        )
        truth = sorted(
            (r.request, f"{r.driver}/{r.pool}/{r.device}", r.share_id or "")
            for r in claim.status.allocation.devices.results
        )
        if said != truth:
            problems.append(
                f"{where}: the annotation lists {', '.join(d for _, d, _ in said) or 'none'}, "
                f"claim {name} has {', '.join(d for _, d, _ in truth) or 'none'}"
            )
    for extra in sorted(listed):
        problems.append(f"the annotation lists claim entry {extra}, which the pod does not have")
    return problems


def _invalid_selectors(snapshot: Snapshot, mode: SelectorMode) -> _Found:
    objects: list[tuple[str, Checked]] = [
        *((f"DeviceClass {k}", o) for k, o in sorted(snapshot.device_classes.items())),
        *((f"ResourceClaim {k}", o) for k, o in sorted(snapshot.claims.items())),
        *((f"ResourceClaimTemplate {k}", o) for k, o in sorted(snapshot.templates.items())),
    ]
    found: list[Violation] = []
    for subject, obj in objects:
        if not mode.stored:
            problems = refused_selectors(
                obj,
                list_attributes=mode.list_attributes,
                consumable_capacity=mode.consumable_capacity,
            )
            found.extend(Violation(INVALID_SELECTOR, subject, str(p)) for p in problems)
            continue
        stored: list[tuple[str, str, Callable[..., object]]] = [
            (path, expression, compile_selector) for path, expression in selector_paths(obj)
        ]
        if not isinstance(obj, DeviceClass):
            stored += [(path, e, compile_derived) for path, e in derived_paths(obj)]
        for path, expression, compile_stored in stored:
            try:
                compile_stored(
                    expression,
                    list_attributes=mode.list_attributes,
                    consumable_capacity=mode.consumable_capacity,
                    stored=True,
                )
            except CELError as error:
                found.append(Violation(INVALID_SELECTOR, subject, f"{path}: {error}"))
    return found, len(objects)


def _owned_by(claim: ResourceClaim, uid: str) -> bool:
    return any(
        owner.controller and owner.kind == "Pod" and owner.uid == uid
        for owner in claim.metadata.owner_references or ()
    )


_RULES: Final = {
    DEVICE_ALLOCATED_TWICE: _devices_twice,
    CAPACITY_EXCEEDED: _capacity,
    COUNTERS_EXCEEDED: _counters,
    RESERVED_FOR_MISSING_POD: _reserved_for,
    ALLOCATED_WITHOUT_FINALIZER: _finalizers,
    GATED_POD_CLAIM_MISSING: _gated_pods,
    DEVICES_ANNOTATION_MISMATCH: _devices_annotations,
    BOUND_POD_CLAIM_NOT_RESERVED: _bound_pods,
}


# -- output ------------------------------------------------------------------------------------


def render_report(report: CheckReport, output: Literal["table", "json", "yaml"] = "table") -> str:
    """The report as ``dralloc check`` prints it."""
    if output in ("json", "yaml"):
        data = {
            "ok": report.ok,
            "violations": [
                {"rule": v.rule, "subject": v.subject, "message": v.message}
                for v in report.violations
            ],
            "checked": dict(report.checked),
            "skipped": dict(report.skipped),
            "unreadable": list(report.unreadable),
        }
        if output == "json":
            return json.dumps(data, indent=2)
        import yaml

        return yaml.safe_dump(data, sort_keys=False).rstrip()
    lines = [str(v) for v in report.violations]
    for rule, reason in report.skipped.items():
        lines.append(f"skipped {rule}: {reason}")
    for problem in report.unreadable:
        lines.append(f"left out (does not parse): {problem}")
    examined = ", ".join(f"{rule} {count}" for rule, count in report.checked.items())
    verdict = f"{len(report.violations)} violation(s)" if report.violations else "no violations"
    lines.append(f"{verdict} (examined: {examined or 'nothing'})")
    return "\n".join(lines)
