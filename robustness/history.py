"""What the recorder saw, reduced to the facts the checker judges.

A watch event carries a whole object; the checker needs a few facts of it: which devices a
claim holds and for whom, which claims a pod names and whether it is bound, what a quota
allows. Reducing at record time keeps a long history small and makes the checker's input
plain values that a unit test can write by hand.

Both API modes are read by one parser: a pod names its claims in
``spec.resourceClaims`` (in-tree) or in dralloc's ``resource.dralloc.dev/claims`` annotation
(crd mode), and its claim names are in ``status.resourceClaimStatuses`` or the
``claim-statuses`` annotation; a pod has one or the other, so reading both is exact in each.

Order: every write in Kubernetes gets the next etcd revision, shared by all kinds, so events
of different kinds merged by ``resourceVersion`` are in the order they happened. A relist
(after a 410) cannot show what happened between the last event and the list: the history
records such a stretch as a :class:`Gap`, and a violation seen across one is reported as
unverifiable rather than trusted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

DRALLOC_GROUP: Final = "resource.dralloc.dev"
CLAIMS_ANNOTATION: Final = f"{DRALLOC_GROUP}/claims"
CLAIM_STATUSES_ANNOTATION: Final = f"{DRALLOC_GROUP}/claim-statuses"
GATE: Final = f"{DRALLOC_GROUP}/allocation"
GANG_ANNOTATION: Final = f"{DRALLOC_GROUP}/gang"
GANG_SIZE_ANNOTATION: Final = f"{DRALLOC_GROUP}/gang-size"
DEVICES_ALLOCATED_CONDITION: Final = f"{DRALLOC_GROUP}/DevicesAllocated"
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
REFUSED_REASON: Final = "SchedulerRefused"
"""dralloc's condition reason for a released pod kube-scheduler does not bind."""
PREEMPTION_REASON: Final = "PreemptionByScheduler"
"""Upstream's DisruptionTarget reason for preemption victims, which dralloc's preemption uses."""

POD_GROUP_GANG: Final = "podgroup:"
"""How a PodGroup gang is named among a namespace's gangs (annotation gangs have no colon)."""

Kind = Literal["claim", "pod", "quota", "podgroup"]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True, order=True)
class DeviceId:
    """One device of a pool, as an allocation result names it."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


Access = Literal["exclusive", "share", "admin"]


@dataclass(frozen=True)
class HeldDevice:
    """A device in a claim's allocation, and how it is held: ``exclusive`` (the default),
    ``share`` (a share of a multi-allocatable device: a result with a ``shareID``, which
    other shares may hold beside it, as upstream) or ``admin`` (admin access, which holds
    nothing: upstream allocates such a result beside any other)."""

    device: DeviceId
    access: Access
    device_class: str
    """The DeviceClass its request asked through ("" when the request is not in the spec)."""


@dataclass(frozen=True)
class ClaimFacts:
    namespace: str
    name: str
    uid: str
    devices: tuple[HeldDevice, ...]
    """The allocation's devices; empty when not allocated."""
    allocated: bool
    reserved_for: frozenset[str]
    """Pod UIDs in ``status.reservedFor``."""
    owner_pod: str
    """The UID of the pod that owns it (a claim made from a template), or ""."""
    pod_claim_name: str = ""
    """The owner's claim entry it was made for (the ``pod-claim-name`` annotation), or ""."""
    nodes: frozenset[str] = frozenset()
    """The nodes its allocation is for (its node selector's ``metadata.name`` field or
    hostname label); empty when it names none (network-attached devices, no allocation)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PodFacts:
    namespace: str
    name: str
    uid: str
    node: str
    """``spec.nodeName``: bound when set."""
    gated: bool
    """It carries dralloc's scheduling gate: kube-scheduler cannot bind it yet."""
    phase: str
    direct_claims: tuple[str, ...]
    """Claims it names by ``resourceClaimName``."""
    template_entries: tuple[str, ...]
    """Its entries made from a template, whose claim names the claim statuses give."""
    claim_statuses: Mapping[str, str]
    """Entry name -> generated claim name (an entry that needs no claim maps to "")."""
    extended_claim: str
    """The claim kube-scheduler made for the pod's extended resources, or ""."""
    gang: str
    """Its gang annotation, or ``podgroup:<name>`` for a pod of a Workload API PodGroup."""
    gang_size: int
    """The gang-size annotation (0 for a PodGroup's pod: its PodGroup says)."""
    explained: bool
    """It carries a condition saying why it is not running: dralloc's DevicesAllocated=False
    or kube-scheduler's PodScheduled=False, with a message."""
    why: str = ""
    """Those conditions, as ``type reason: message`` (shortened), for the report."""
    priority: int = 0
    """``spec.priority`` (its PriorityClass's value, set at admission)."""
    preempts: bool = True
    """Its ``preemptionPolicy`` is not ``Never``."""
    preempted: bool = False
    """dralloc marked it a preemption victim: ``DisruptionTarget`` with upstream's reason
    ``PreemptionByScheduler`` and a message of dralloc's."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        return bool(self.node) and self.phase not in TERMINAL_PHASES

    @property
    def has_claims(self) -> bool:
        return bool(self.direct_claims or self.template_entries or self.extended_claim)

    def claim_names(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(claims it needs by name, template entries whose claim is not known yet)."""
        names = list(self.direct_claims)
        missing = []
        for entry in self.template_entries:
            if entry not in self.claim_statuses:
                missing.append(entry)
            elif self.claim_statuses[entry]:
                names.append(self.claim_statuses[entry])
        if self.extended_claim:
            names.append(self.extended_claim)
        return tuple(names), tuple(missing)


@dataclass(frozen=True)
class QuotaFacts:
    namespace: str
    name: str
    device_class: str
    selectors: bool
    """It narrows the counted devices by CEL; the checker does not evaluate CEL and skips it."""
    hard_devices: int | None
    hard_claims: int | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PodGroupFacts:
    """A Workload API PodGroup (scheduling.k8s.io): a gang of ``min_count`` when its policy
    is ``gang``; ``min_count`` None for any other policy (no gang)."""

    namespace: str
    name: str
    min_count: int | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


Facts = ClaimFacts | PodFacts | QuotaFacts | PodGroupFacts


@dataclass(frozen=True)
class Event:
    """One change: the object's facts after it (before it, for a deletion)."""

    rv: int
    kind: Kind
    type: EventType
    facts: Facts
    at: float
    """Seconds since the recording started, when the recorder received it."""
    relisted: bool = False
    """Synthesised from a relist, not seen as it happened."""

    @property
    def key(self) -> str:
        return self.facts.key


@dataclass(frozen=True)
class Gap:
    """A stretch of one kind's history the recorder did not see (a relist after a 410)."""

    kind: Kind
    after_rv: int
    until_rv: int


@dataclass
class History:
    events: list[Event] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    warned: frozenset[str] = frozenset()
    """``namespace/name`` of pods with a Warning Event (read at the end of a run)."""
    settled: bool = True
    """The run ended with the cluster at rest (then rule 5 applies to the end state)."""

    def ordered(self) -> list[Event]:
        """Events in the order they happened; on one revision (a relist's synthesised event
        beside a watched one) the watched one first."""
        return sorted(self.events, key=lambda e: (e.rv, e.relisted))


# -- from API objects ---------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def resource_version(obj: Mapping[str, Any]) -> int:
    try:
        return int(_meta(obj).get("resourceVersion") or 0)
    except ValueError:
        return 0


def claim_facts(obj: Mapping[str, Any]) -> ClaimFacts:
    meta = _meta(obj)
    annotations = meta.get("annotations") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    classes = _request_classes(((spec.get("devices") or {}).get("requests")) or ())
    allocation = status.get("allocation") or None
    held: list[HeldDevice] = []
    if allocation:
        for result in (allocation.get("devices") or {}).get("results") or ():
            request = str(result.get("request") or "")
            held.append(
                HeldDevice(
                    DeviceId(
                        str(result.get("driver") or ""),
                        str(result.get("pool") or ""),
                        str(result.get("device") or ""),
                    ),
                    access=(
                        "admin"
                        if result.get("adminAccess")
                        else "share"
                        if result.get("shareID")
                        else "exclusive"
                    ),
                    device_class=classes.get(request, classes.get(request.split("/")[0], "")),
                )
            )
    owner = next(
        (
            str(ref.get("uid") or "")
            for ref in meta.get("ownerReferences") or ()
            if ref.get("kind") == "Pod" and ref.get("controller")
        ),
        "",
    )
    return ClaimFacts(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        devices=tuple(held),
        allocated=allocation is not None,
        reserved_for=frozenset(
            str(ref.get("uid") or "") for ref in status.get("reservedFor") or ()
        ),
        owner_pod=owner,
        nodes=_allocation_nodes(allocation or {}),
        pod_claim_name=str(
            annotations.get(f"{DRALLOC_GROUP}/pod-claim-name")
            or annotations.get("resource.kubernetes.io/pod-claim-name")
            or ""
        ),
    )


def _allocation_nodes(allocation: Mapping[str, Any]) -> frozenset[str]:
    names: set[str] = set()
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or ():
        for requirement in (
            *(term.get("matchFields") or ()),
            *(term.get("matchExpressions") or ()),
        ):
            if requirement.get("key") in ("metadata.name", "kubernetes.io/hostname") and (
                requirement.get("operator") == "In"
            ):
                names.update(str(v) for v in requirement.get("values") or ())
    return frozenset(names)


def _request_classes(requests: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Request name (and ``request/subrequest``) -> the DeviceClass it asks through."""
    found: dict[str, str] = {}
    for request in requests:
        name = str(request.get("name") or "")
        exactly = request.get("exactly") or {}
        if exactly.get("deviceClassName"):
            found[name] = str(exactly["deviceClassName"])
        for sub in request.get("firstAvailable") or ():
            found[f"{name}/{sub.get('name')}"] = str(sub.get("deviceClassName") or "")
    return found


def _json_list(raw: Any) -> list[Mapping[str, Any]]:
    if not isinstance(raw, str):
        return []
    try:
        parsed = json.loads(raw)
    except ValueError:
        return []
    return (
        [entry for entry in parsed if isinstance(entry, Mapping)]
        if isinstance(parsed, list)
        else []
    )


def pod_facts(obj: Mapping[str, Any]) -> PodFacts:
    meta = _meta(obj)
    annotations = meta.get("annotations") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    entries = [*(spec.get("resourceClaims") or ()), *_json_list(annotations.get(CLAIMS_ANNOTATION))]
    statuses = [
        *(status.get("resourceClaimStatuses") or ()),
        *_json_list(annotations.get(CLAIM_STATUSES_ANNOTATION)),
    ]
    try:
        gang_size = int(annotations.get(GANG_SIZE_ANNOTATION) or 0)
    except ValueError:
        gang_size = 0
    explained = False
    preempted = False
    why = []
    for condition in status.get("conditions") or ():
        kind = condition.get("type")
        if (
            kind == "DisruptionTarget"
            and condition.get("status") == "True"
            and condition.get("reason") == PREEMPTION_REASON
            and str(condition.get("message") or "").startswith("dralloc")
        ):
            preempted = True
        waits = (
            kind in (DEVICES_ALLOCATED_CONDITION, "PodScheduled")
            and condition.get("status") == "False"
            # kube-scheduler's note that a gate holds the pod says nothing of why it waits
            and condition.get("reason") != "SchedulingGated"
        )
        # dralloc's word on a released pod kube-scheduler does not bind (its devices stay
        # allocated, so the condition is True): why it does not run.
        refused = kind == DEVICES_ALLOCATED_CONDITION and condition.get("reason") == REFUSED_REASON
        if (waits or refused) and condition.get("message"):
            explained = True
            message = str(condition.get("message"))[:160]
            why.append(f"{str(kind).rsplit('/', 1)[-1]} {condition.get('reason')}: {message}")
    return PodFacts(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        node=str(spec.get("nodeName") or ""),
        gated=any(g.get("name") == GATE for g in spec.get("schedulingGates") or ()),
        phase=str(status.get("phase") or ""),
        direct_claims=tuple(
            str(e["resourceClaimName"]) for e in entries if e.get("resourceClaimName")
        ),
        template_entries=tuple(
            str(e.get("name") or "") for e in entries if e.get("resourceClaimTemplateName")
        ),
        claim_statuses={
            str(s.get("name") or ""): str(s.get("resourceClaimName") or "") for s in statuses
        },
        extended_claim=str(
            (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName") or ""
        ),
        gang=str(annotations.get(GANG_ANNOTATION) or "")
        or (f"{POD_GROUP_GANG}{group}" if (group := _pod_group_name(spec)) else ""),
        gang_size=gang_size,
        explained=explained,
        priority=int(spec.get("priority") or 0),
        preempts=spec.get("preemptionPolicy") != "Never",
        preempted=preempted,
        why="; ".join(why),
    )


def _pod_group_name(spec: Mapping[str, Any]) -> str:
    return str((spec.get("schedulingGroup") or {}).get("podGroupName") or "")


def pod_group_facts(obj: Mapping[str, Any]) -> PodGroupFacts:
    meta = _meta(obj)
    gang = ((obj.get("spec") or {}).get("schedulingPolicy") or {}).get("gang")
    min_count = gang.get("minCount") if isinstance(gang, Mapping) else None
    return PodGroupFacts(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        min_count=min_count if isinstance(min_count, int) else None,
    )


def quota_facts(obj: Mapping[str, Any]) -> QuotaFacts:
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    hard = spec.get("hard") or {}
    return QuotaFacts(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        device_class=str(spec.get("deviceClassName") or ""),
        selectors=bool(spec.get("selectors")),
        hard_devices=hard.get("devices"),
        hard_claims=hard.get("claims"),
    )


def facts_of(kind: Kind, obj: Mapping[str, Any]) -> Facts:
    if kind == "claim":
        return claim_facts(obj)
    if kind == "pod":
        return pod_facts(obj)
    if kind == "podgroup":
        return pod_group_facts(obj)
    return quota_facts(obj)
