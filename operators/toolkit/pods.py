"""Pods as the toolkit sees them: where they may run and which claims they use.

A pod names its claims in one of two ways, and the toolkit reads both so that it works on
either kind of cluster:

- the dralloc pod protocol: the ``resource.dralloc.dev/claims`` annotation (a JSON list
  shaped like ``pod.spec.resourceClaims``) and ``resource.dralloc.dev/claim-statuses``
  (shaped like ``pod.status.resourceClaimStatuses``);
- in-tree DRA: ``pod.spec.resourceClaims`` and ``pod.status.resourceClaimStatuses``.

Only the fields that decide placement are kept; the rest of the pod is irrelevant here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operators.allocator.nodes import NodeSelector, NodeSelectorError
from operators.api.annotations import (
    DEVICES_ANNOTATION,
    SCHEDULING_GATE,
    AnnotationError,
    GangRef,
    PodResourceClaim,
    parse_claim_statuses,
    parse_pod_claims,
    pod_gang,
)
from operators.api.extendedresources import (
    ENTRY_NAME,
    EXTENDED_RESOURCES_ANNOTATION,
    ExtendedResourceError,
)
from operators.api.extendedresources import parse_annotation as parse_extended
from operators.api.podgroup import pod_group_name
from operators.api.podprotocol import DRALLOC, KUBERNETES, PodProtocol
from operators.scheduling.model import PodNeeds, parse_pod_needs
from operators.toolkit.usererrors import ObjectRef, SnapshotError

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class PodClaim:
    """One entry of the pod's claim list: a named claim, or a template to generate from."""

    name: str
    claim_name: str | None = None
    template_name: str | None = None
    spec: Mapping[str, Any] | None = None
    """The spec of a claim made for this pod alone (the claim its DRA extended resources
    became, see operators.api.extendedresources): a simulated copy of the pod gets a claim
    of its own with this spec, not the original's claim."""

    def for_copy(self) -> PodClaim:
        """The entry of a simulated copy of the pod."""
        return dataclasses.replace(self, claim_name=None) if self.spec is not None else self


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        if self.effect and self.effect != effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != key:
            return False
        return self.operator == "Exists" or self.value == value


@dataclass(frozen=True)
class PodInfo:
    """The placement-relevant part of a pod."""

    ref: ObjectRef
    namespace: str
    name: str
    uid: str
    node_name: str | None
    phase: str
    deleting: bool
    claims: tuple[PodClaim, ...]
    claim_statuses: Mapping[str, str | None]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_affinity: Mapping[str, Any] | None = None
    """``nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` as given."""
    tolerations: tuple[Toleration, ...] = ()
    gated: bool = False
    protocol: PodProtocol = DRALLOC
    """How the pod asks for claims: dralloc's annotations or ``spec.resourceClaims``."""
    needs: PodNeeds | None = None
    """What the scheduler's filters read; None for pods the toolkit makes up itself."""
    devices_annotation: str | None = None
    """The ``resource.dralloc.dev/devices`` annotation as written (dralloc's output, which
    ``dralloc check`` compares with the claims; never read as proof of an allocation)."""
    gang: GangRef | None = None
    """The pod's gang, placed all or nothing: its gang annotations (``resource.dralloc.dev/gang``
    and ``gang-size``), else its PodGroup's gang (resolved by the snapshot)."""
    pod_group: str = ""
    """``spec.schedulingGroup.podGroupName``: the upstream Workload API PodGroup it joins."""
    gang_problem: str = ""
    """Why the pod cannot be decided: its PodGroup does not exist, or has a policy dralloc
    cannot follow ('' = none). The operator keeps such a pod waiting with this reason."""

    def scheduling_needs(self) -> PodNeeds:
        """The filters' view of this pod as it is now (simulated copies of a pod get their
        own name and no node; pods made up here get their selectors and tolerations)."""
        if self.needs is not None:
            if self.needs.name == self.name and self.needs.node_name == (self.node_name or ""):
                return self.needs
            return dataclasses.replace(
                self.needs,
                namespace=self.namespace,
                name=self.name,
                node_name=self.node_name or "",
                pinned_node="",
                gated=True,
            )
        affinity: NodeSelector | None = None
        if self.required_affinity:
            try:
                affinity = NodeSelector.parse(self.required_affinity)
            except NodeSelectorError:
                affinity = NodeSelector(())
        return PodNeeds(
            namespace=self.namespace,
            name=self.name,
            labels={},
            node_name=self.node_name or "",
            terminal=self.phase in FINISHED_PHASES,
            deleting=self.deleting,
            gated=self.gated,
            requests={},
            host_ports=(),
            node_selector=dict(self.node_selector),
            node_affinity=affinity,
            tolerations=tuple(
                {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
                for t in self.tolerations
            ),
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def active(self) -> bool:
        return not self.deleting and self.phase not in FINISHED_PHASES

    def generated_claim_name(self, entry: PodClaim) -> str | None:
        """The name of the claim behind an entry, if it is known."""
        if entry.claim_name:
            return entry.claim_name
        return self.claim_statuses.get(entry.name)


def parse_pod(ref: ObjectRef, body: Mapping[str, Any]) -> PodInfo:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    annotations = meta.get("annotations") or {}
    # A snapshot may hold pods of both modes: one that asks by annotation is dralloc's.
    protocol = DRALLOC if DRALLOC.asks_for_claims(body) else KUBERNETES
    claims_text, where = protocol.claims_text(body)
    statuses_text, status_where = protocol.statuses_text(body)
    try:
        entries = parse_pod_claims(claims_text)
    except AnnotationError as exc:
        raise SnapshotError(ref, "; ".join(exc.problems), where) from exc
    try:
        statuses = parse_claim_statuses(statuses_text) if statuses_text else ()
    except AnnotationError as exc:
        raise SnapshotError(ref, "; ".join(exc.problems), status_where) from exc
    try:
        gang = pod_gang(annotations)
    except AnnotationError as exc:
        raise SnapshotError(
            ref, "; ".join(exc.problems), f"metadata.annotations[{exc.annotation}]"
        ) from exc
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    gates = [g.get("name") for g in spec.get("schedulingGates") or [] if isinstance(g, Mapping)]
    extended = _extended_claim(annotations) if protocol.extended_resources else {}
    return PodInfo(
        ref=ref,
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or f"uid-{meta.get('namespace')}-{meta.get('name')}"),
        node_name=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        claims=tuple(_pod_claim(e, extended) for e in entries),
        claim_statuses={s.name: s.resource_claim_name for s in statuses},
        node_selector=dict(spec.get("nodeSelector") or {}),
        required_affinity=affinity,
        tolerations=tuple(_toleration(t) for t in spec.get("tolerations") or []),
        gated=SCHEDULING_GATE in gates,
        protocol=protocol,
        needs=parse_pod_needs(body),
        devices_annotation=annotations.get(DEVICES_ANNOTATION),
        gang=gang,
        pod_group=pod_group_name(spec),
    )


def _pod_claim(
    entry: PodResourceClaim, extended: Mapping[str, tuple[str, Mapping[str, Any]]]
) -> PodClaim:
    made_for_it = extended.get(entry.name)
    spec = made_for_it[1] if made_for_it and made_for_it[0] == entry.resource_claim_name else None
    return PodClaim(
        entry.name, entry.resource_claim_name, entry.resource_claim_template_name, spec=spec
    )


def _extended_claim(
    annotations: Mapping[str, str],
) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Entry name -> (claim name, spec) of the claim the pod's extended resources became."""
    text = annotations.get(EXTENDED_RESOURCES_ANNOTATION)
    if text is None:
        return {}
    try:
        claim = parse_extended(text)
    except ExtendedResourceError:
        return {}  # the operator reports it; the entry is a named claim like any other
    return {ENTRY_NAME: (claim.claim_name, claim.claim_spec())}


def claims_annotation(entries: Sequence[PodClaim]) -> str:
    """The annotation value for a list of entries (used for simulated pods)."""
    out = []
    for entry in entries:
        item: dict[str, str] = {"name": entry.name}
        if entry.claim_name:
            item["resourceClaimName"] = entry.claim_name
        if entry.template_name:
            item["resourceClaimTemplateName"] = entry.template_name
        out.append(item)
    return json.dumps(out)


def _toleration(data: Mapping[str, Any]) -> Toleration:
    return Toleration(
        key=str(data.get("key") or ""),
        operator=str(data.get("operator") or "Equal"),
        value=str(data.get("value") or ""),
        effect=str(data.get("effect") or ""),
    )
