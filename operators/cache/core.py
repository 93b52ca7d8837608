"""Frozen views of the core/v1 objects the controllers read: pods, nodes, namespaces.

A Pod body is large (containers, volumes, managedFields) and the controllers need a dozen of
its fields; keeping only those makes the pod cache small and each field access cheap. The
views are built once per watch event. The pod protocol annotations (docs/design.md "The pod
protocol") are decoded here too (with :mod:`operators.api.annotations`), so a malformed
annotation is found once and reported as ``claims_error``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from operators.api.annotations import (
    ADMIN_ACCESS_LABEL,
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    DEVICES_ANNOTATION,
    FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
    SCHEDULING_GATE,
    AnnotationError,
    GangRef,
    PodResourceClaim,
    PodResourceClaimStatus,
    format_claim_statuses,
    pod_gang,
)
from operators.api.extendedresources import (
    ENTRY_NAME,
    EXTENDED_RESOURCES_ANNOTATION,
    ExtendedClaim,
    ExtendedResourceError,
    parse_annotation,
)
from operators.api.podgroup import pod_group_name
from operators.api.podprotocol import DRALLOC, PodProtocol
from operators.api.quickinit import quick_init
from operators.kube import JsonDict
from operators.scheduling.model import Node, PodNeeds, parse_node, parse_pod_needs

__all__ = [
    "ADMIN_ACCESS_LABEL",
    "CLAIMS_ANNOTATION",
    "CLAIM_STATUSES_ANNOTATION",
    "DEVICES_ALLOCATED_CONDITION",
    "DEVICES_ANNOTATION",
    "FINALIZER",
    "POD_CLAIMS_INDEX",
    "POD_CLAIM_NAME_ANNOTATION",
    "POD_GANG_INDEX",
    "SCHEDULING_GATE",
    "Namespace",
    "Node",
    "Pod",
    "PodResourceClaim",
    "PodResourceClaimStatus",
    "parse_node",
]


POD_GANG_INDEX = "pod-gang"
"""Pods by the (namespace, gang name) of their gang annotation or PodGroup (Pod.gang_keys)."""
DEVICES_ALLOCATED_CONDITION = "resource.dralloc.dev/DevicesAllocated"
"""dralloc's own pod condition: whether the pod's devices are allocated."""
KEPT_CONDITIONS = frozenset({"PodScheduled", DEVICES_ALLOCATED_CONDITION})
"""The pod conditions the controllers read (kube-scheduler's verdict and dralloc's own); a
running pod's others (Ready, Initialized, ...) would be a few hundred bytes each per pod."""
POD_CLAIMS_INDEX = "pod-claims"
"""The pod index every controller shares: pods by the (namespace, name) of their claims."""


def render_claim_statuses(statuses: tuple[PodResourceClaimStatus, ...]) -> str:
    """The canonical JSON of the claim-statuses annotation (stable: no update loops)."""
    return format_claim_statuses(statuses)


@quick_init
@dataclasses.dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    resource_version: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    node_name: str
    phase: str
    deleting: bool
    scheduling_gates: tuple[str, ...]
    required_affinity: Mapping[str, Any] | None
    conditions: tuple[Mapping[str, Any], ...]
    """Only those of :data:`KEPT_CONDITIONS`."""
    claims: tuple[PodResourceClaim, ...]
    claims_error: str
    claim_statuses: tuple[PodResourceClaimStatus, ...]
    needs: PodNeeds
    """What kube-scheduler's filters read (requests, ports, inter-pod rules, ...)."""
    controller: str = ""
    """``Kind/name`` of the controller owning the pod ('' = a bare pod)."""
    created: str = ""
    """``metadata.creationTimestamp`` as the API server wrote it ('' = unknown)."""
    gang: GangRef | None = None
    """The gang the pod belongs to (gang annotations), allocated all or nothing."""
    gang_error: str = ""
    """Why the gang annotations are malformed ('' = they are not)."""
    extended: ExtendedClaim | None = None
    """The claim its DRA extended resources became at admission (in-tree), checked against
    its ``spec.resourceClaims``; the claim controller creates it."""
    extended_error: str = ""
    """Why the extended-resources annotation cannot be served ('' = it can, or is absent)."""
    pod_group: str = ""
    """``spec.schedulingGroup.podGroupName``: the upstream Workload API's PodGroup of the
    pod's namespace (immutable). A gang where that PodGroup's policy is one and the gang
    annotations name none (they win); see operators.controllers.allocation.gangdecision.gang_of."""
    protocol: PodProtocol = DRALLOC
    """How the pod asks for claims (the operator's mode; in a snapshot, the pod's own)."""

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def uses_claims(self) -> bool:
        return bool(self.claims) or bool(self.claims_error)

    @property
    def gated(self) -> bool:
        return SCHEDULING_GATE in self.scheduling_gates

    @property
    def active(self) -> bool:
        """Neither finished nor being deleted: a pod that may still hold or want devices."""
        return not self.deleting and self.phase not in ("Succeeded", "Failed")

    @property
    def done(self) -> bool:
        """Upstream's rule: finished, or being deleted before it was ever scheduled."""
        return self.phase in ("Succeeded", "Failed") or (self.deleting and not self.node_name)

    def claim_name(self, pod_claim: PodResourceClaim) -> str | None:
        """The ResourceClaim name an entry refers to, if known yet."""
        if pod_claim.resource_claim_name is not None:
            return pod_claim.resource_claim_name
        for status in self.claim_statuses:
            if status.name == pod_claim.name:
                return status.resource_claim_name
        return None

    def claim_names(self) -> list[str]:
        """The names of the ResourceClaims the pod's entries refer to (those known yet)."""
        names = []
        for pod_claim in self.claims:
            name = self.claim_name(pod_claim)
            if name:
                names.append(name)
        return names

    def gang_keys(self) -> list[tuple[str, str]]:
        """``(namespace, gang)``: the :data:`POD_GANG_INDEX` value, if the pod may be in one:
        the gang its annotations name, else its PodGroup (whose policy says whether it is a
        gang; the pods of a ``basic`` group are indexed all the same). Malformed annotations
        name none: the pod is told, and its PodGroup is not used instead."""
        if self.gang is not None:
            return [(self.namespace, self.gang.name)]
        if self.pod_group and not self.gang_error:
            return [(self.namespace, self.pod_group)]
        return []

    def claim_keys(self) -> list[tuple[str, str]]:
        """``(namespace, name)`` of each known claim: the :data:`POD_CLAIMS_INDEX` values."""
        return [(self.namespace, name) for name in self.claim_names()]

    def involved(self) -> JsonDict:
        """The minimal object an Event needs to point at this pod."""
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "namespace": self.namespace,
                "name": self.name,
                "uid": self.uid,
                "resourceVersion": self.resource_version,
            },
        }


def parse_pod(raw: JsonDict, protocol: PodProtocol = DRALLOC) -> Pod:
    metadata = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    annotations = dict(metadata.get("annotations") or {})
    claims, error = protocol.pod_claims(raw)
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    gates = tuple(g.get("name", "") for g in spec.get("schedulingGates") or ())
    try:
        gang, gang_error = pod_gang(annotations), ""
    except AnnotationError as problem:
        gang, gang_error = None, str(problem)
    needs = parse_pod_needs(raw)
    extended, extended_error = _extended_claim(annotations, claims, protocol)
    return Pod(
        namespace=metadata.get("namespace") or "",
        name=metadata.get("name") or "",
        uid=metadata.get("uid") or "",
        resource_version=str(metadata.get("resourceVersion") or ""),
        # The same labels the scheduler's view read: one dict per pod, not two.
        labels=needs.labels,
        annotations=annotations,
        node_name=spec.get("nodeName") or "",
        phase=status.get("phase") or "",
        deleting=bool(metadata.get("deletionTimestamp")),
        scheduling_gates=gates,
        required_affinity=affinity,
        conditions=tuple(
            [c for c in status.get("conditions") or () if c.get("type") in KEPT_CONDITIONS]
        ),
        claims=claims,
        claims_error=error,
        claim_statuses=protocol.claim_statuses(raw),
        needs=needs,
        controller=next(
            (
                f"{ref.get('kind')}/{ref.get('name')}"
                for ref in metadata.get("ownerReferences") or ()
                if ref.get("controller")
            ),
            "",
        ),
        created=str(metadata.get("creationTimestamp") or ""),
        gang=gang,
        gang_error=gang_error,
        pod_group=pod_group_name(spec),
        extended=extended,
        extended_error=extended_error,
        protocol=protocol,
    )


def _extended_claim(
    annotations: Mapping[str, str], claims: tuple[PodResourceClaim, ...], protocol: PodProtocol
) -> tuple[ExtendedClaim | None, str]:
    """The annotation's claim if the pod's own entry names it (in-tree only)."""
    text = annotations.get(EXTENDED_RESOURCES_ANNOTATION)
    if text is None or not protocol.claims_in_spec:
        return None, ""
    try:
        extended = parse_annotation(text)
    except ExtendedResourceError as error:
        return None, str(error)
    entry = next((c for c in claims if c.name == ENTRY_NAME), None)
    if entry is None or entry.resource_claim_name != extended.claim_name:
        return None, (
            f"annotation {EXTENDED_RESOURCES_ANNOTATION}: names claim "
            f"{extended.claim_name!r}, but spec.resourceClaims has no entry {ENTRY_NAME!r} "
            "naming it"
        )
    return extended, ""


@dataclasses.dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: Mapping[str, str]
    admin_access_label: str = ADMIN_ACCESS_LABEL
    """The label that allows adminAccess here, in the API mode's name."""

    @property
    def allows_admin_access(self) -> bool:
        return self.labels.get(self.admin_access_label) == "true"


def parse_namespace(raw: JsonDict, protocol: PodProtocol = DRALLOC) -> Namespace:
    metadata = raw.get("metadata") or {}
    return Namespace(
        name=metadata.get("name") or "",
        labels=dict(metadata.get("labels") or {}),
        admin_access_label=protocol.admin_access_label,
    )


def gated_by_dralloc(raw: JsonDict) -> bool:
    """Whether dralloc's scheduling gate is on the pod (read from the raw object)."""
    return any(
        g.get("name") == SCHEDULING_GATE
        for g in (raw.get("spec") or {}).get("schedulingGates") or ()
    )
