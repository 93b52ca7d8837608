"""How pods and dralloc talk in each API mode: the one place the two modes differ for pods.

dralloc runs on its own CRDs (``resource.dralloc.dev``) or on the in-tree kinds
(``resource.k8s.io``). The controllers and the allocator are the same in both; what differs is
where a pod asks for devices, where the names of its generated claims are recorded, and the
names upstream's kubelet, kube-scheduler and kube-controller-manager look for:

=====================  ===========================================  =====================================
                       ``resource.dralloc.dev`` (CRDs)              ``resource.k8s.io`` (in-tree)
=====================  ===========================================  =====================================
pod asks for claims    annotation ``resource.dralloc.dev/claims``   ``spec.resourceClaims``
claim names recorded   annotation ``.../claim-statuses``            ``status.resourceClaimStatuses``
generated claim        ``resource.dralloc.dev/pod-claim-name``      ``resource.kubernetes.io/pod-claim-name``
finalizer              ``resource.dralloc.dev/delete-protection``   ``resource.kubernetes.io/delete-protection``
adminAccess namespace  ``resource.dralloc.dev/admin-access``        ``resource.kubernetes.io/admin-access``
released pod           pinned to the node by a node affinity        the same (see :attr:`pins_node`)
claim conditions       ``status.conditions`` (``Allocated``)        none (see :attr:`claim_conditions`)
=====================  ===========================================  =====================================

The gate, the devices annotation and the allocation record are dralloc's own and the same in
both modes. A :class:`PodProtocol` is chosen once at startup from the API group setting and
handed to whatever reads or writes pods; nothing else asks which mode it is in.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pydantic import ValidationError

from operators.api import annotations as ann
from operators.api.base import SHARED_PARTS
from operators.api.common import KUBERNETES_GROUP
from operators.api.fielderrors import describe
from operators.api.limits import POD_RESOURCE_CLAIMS_MAX_SIZE
from operators.api.models import GROUP

JsonDict = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class PodProtocol:
    """The pod-facing names and fields of one API mode."""

    group: str
    """API group of the DRA kinds: ``resource.dralloc.dev`` or ``resource.k8s.io``."""
    finalizer: str
    """Finalizer held on a claim while it is allocated (kcm's claim controller, where it
    runs, deallocates only claims that carry it)."""
    pod_claim_name_annotation: str
    """Annotation of a generated claim naming the pod's claim entry."""
    admin_access_label: str
    """Namespace label (value ``"true"``) required for adminAccess requests there."""
    claims_in_spec: bool
    """Pods ask with ``spec.resourceClaims`` (in-tree) instead of the claims annotation."""
    claim_conditions: bool
    """Whether claims have ``status.conditions`` for dralloc's ``Allocated`` condition.

    dralloc's CRDs have the field. ``resource.k8s.io/v1`` claims do not: the API server
    drops it from a write (with a warning), so writing it there is a request that changes
    nothing, repeated at every explanation since the condition never shows up. In-tree the
    reason for a waiting claim is on its pod (condition and Events) and in Events on the
    claim."""
    pins_node: bool
    """Whether a released pod gets a required node affinity for the chosen node (both modes).

    On our CRDs nothing but that affinity keeps kube-scheduler on the node whose devices were
    allocated. In-tree the claim's ``allocation.nodeSelector`` would, but an unpinned pod lets
    kube-scheduler's DRA plugin judge the claim on every node: when no node passes (its view
    of the chosen node lags, or the node no longer fits), its PostFilter clears the claim,
    and it does not put its own write into its claim cache. Its next attempt may then still
    see the claim allocated and reserved for the pod (dralloc reserves with the allocation),
    so PreBind writes nothing and the pod is bound while its claim holds no devices (the
    robustness run caught four such pods after API server restarts, 1.37.2). Pinned, nodes
    other than the chosen one fail NodeAffinity first, the plugin never marks the claim
    unavailable, and it clears nothing; a pod the chosen node refuses is handled by
    :mod:`operators.controllers.released`, as on our CRDs. A pod that passed the gate by
    (:attr:`allocates_ungated`) cannot be pinned: a pod's affinity may change only while it
    is gated."""
    extended_resources: bool = False
    """Whether pods may ask for devices as extended resources (KEP-5004): dralloc's webhook
    turns them into a claim of the pod in in-tree mode only."""
    allocates_ungated: bool = False
    """Whether dralloc allocates the claims of a pod that is neither gated nor bound (it
    passed the gate by).

    In-tree, kube-scheduler binds a pod only where its allocated claims are (the
    allocation's ``nodeSelector``), so dralloc can choose the node and devices for it as for
    a gated pod, while the claim-allocation admission policy refuses kube-scheduler's own
    allocation. Our CRDs are unknown to kube-scheduler: it binds such a pod wherever it
    fits, and dralloc allocates on that node once it is bound."""
    status_summaries: bool = False
    """Whether claims have dralloc's ``status.allocatedDevices`` and
    ``status.reservedForNames``: the allocated devices' and the consumers' names in one string
    each, for the CRD's ``Devices`` and ``Reserved For`` printer columns. The API server's
    printer takes only the first value of a JSONPath (``results[*].device`` showed one device
    of many, ``reservedFor[*].name`` one pod of a shared claim), so the operator writes each
    summary with its list, and the CRD's CEL rules refuse one that does not match. Not in
    ``resource.k8s.io/v1``, whose server drops unknown fields."""

    def pod_claims(self, raw: Mapping[str, Any]) -> tuple[tuple[ann.PodResourceClaim, ...], str]:
        """The pod's claim entries and an error message ('' if they are fine)."""
        if self.claims_in_spec:
            entries = (raw.get("spec") or {}).get("resourceClaims")
            if not entries:
                return (), ""
            return _spec_claims(entries)
        text = ((raw.get("metadata") or {}).get("annotations") or {}).get(ann.CLAIMS_ANNOTATION)
        if text is None:
            return (), ""
        try:
            return ann.parse_pod_claims(text), ""
        except ann.AnnotationError as error:
            return (), str(error)

    def claims_text(self, raw: Mapping[str, Any]) -> tuple[str, str]:
        """The pod's claim entries as JSON text (the annotation as written, or
        ``spec.resourceClaims`` rendered), and the field they come from, for messages."""
        if self.claims_in_spec:
            return json.dumps((raw.get("spec") or {}).get("resourceClaims") or []), (
                "spec.resourceClaims"
            )
        annotations = (raw.get("metadata") or {}).get("annotations") or {}
        where = f"metadata.annotations[{ann.CLAIMS_ANNOTATION}]"
        return str(annotations.get(ann.CLAIMS_ANNOTATION) or "[]"), where

    def statuses_text(self, raw: Mapping[str, Any]) -> tuple[str | None, str]:
        """The recorded claim names as JSON text (None: nothing recorded), and the field they
        come from, for messages."""
        if self.claims_in_spec:
            statuses = (raw.get("status") or {}).get("resourceClaimStatuses") or []
            return json.dumps(statuses), "status.resourceClaimStatuses"
        annotations = (raw.get("metadata") or {}).get("annotations") or {}
        where = f"metadata.annotations[{ann.CLAIM_STATUSES_ANNOTATION}]"
        return annotations.get(ann.CLAIM_STATUSES_ANNOTATION), where

    def asks_for_claims(self, raw: Mapping[str, Any]) -> bool:
        """Whether a pod opted in (with an empty or malformed request too)."""
        if self.claims_in_spec:
            return bool((raw.get("spec") or {}).get("resourceClaims"))
        return ann.CLAIMS_ANNOTATION in ((raw.get("metadata") or {}).get("annotations") or {})

    def claim_statuses(self, raw: Mapping[str, Any]) -> tuple[ann.PodResourceClaimStatus, ...]:
        """The recorded claim names; anything malformed reads as nothing recorded."""
        if self.claims_in_spec:
            entries = (raw.get("status") or {}).get("resourceClaimStatuses") or ()
            try:
                return tuple(ann.PodResourceClaimStatus.model_validate(e) for e in entries)
            except ValidationError:
                return ()
        text = ((raw.get("metadata") or {}).get("annotations") or {}).get(
            ann.CLAIM_STATUSES_ANNOTATION
        )
        if not text:
            return ()
        try:
            return ann.parse_claim_statuses(text)
        except ann.AnnotationError:
            return ()

    def statuses_write(
        self, statuses: Sequence[ann.PodResourceClaimStatus]
    ) -> tuple[JsonDict, str]:
        """The merge patch that records ``statuses`` on a pod, and its subresource."""
        if self.claims_in_spec:
            # As kcm writes it: the status subresource (the list replaces the old one whole).
            return {"status": {"resourceClaimStatuses": [s.to_kube() for s in statuses]}}, "status"
        rendered = ann.format_claim_statuses(statuses)
        return {"metadata": {"annotations": {ann.CLAIM_STATUSES_ANNOTATION: rendered}}}, ""

    @property
    def statuses_in_pod_patch(self) -> bool:
        """Whether the claim statuses can ride in the allocation's one pod write (metadata
        and spec); in-tree they live in the status subresource, a write of its own."""
        return not self.claims_in_spec


_SPEC_CLAIM_FIELDS: Final = frozenset({"name", "resourceClaimName", "resourceClaimTemplateName"})


def _spec_claims(entries: Any) -> tuple[tuple[ann.PodResourceClaim, ...], str]:
    # The API server has validated spec.resourceClaims; this only turns it into our model.
    # Fields a later API version may add are not ours to refuse: only the known ones are read.
    if not isinstance(entries, list):
        return (), "spec.resourceClaims: must be a list"
    if len(entries) > POD_RESOURCE_CLAIMS_MAX_SIZE:
        return (), (
            f"spec.resourceClaims: has {len(entries)} entries; at most "
            f"{POD_RESOURCE_CLAIMS_MAX_SIZE} are allowed"
        )
    try:
        return tuple(
            ann.PodResourceClaim.model_validate(
                {k: v for k, v in e.items() if k in _SPEC_CLAIM_FIELDS and v is not None},
                context=SHARED_PARTS,
            )
            for e in entries
        ), ""
    except (ValidationError, AttributeError) as error:
        problems = describe(error) if isinstance(error, ValidationError) else [str(error)]
        return (), f"spec.resourceClaims: {'; '.join(str(p) for p in problems)}"


DRALLOC: Final = PodProtocol(
    group=GROUP,
    finalizer=ann.FINALIZER,
    pod_claim_name_annotation=ann.POD_CLAIM_NAME_ANNOTATION,
    admin_access_label=ann.ADMIN_ACCESS_LABEL,
    claims_in_spec=False,
    claim_conditions=True,
    pins_node=True,
    status_summaries=True,
)
"""dralloc's CRDs and the annotation protocol (docs/design.md "The pod protocol")."""

KUBERNETES: Final = PodProtocol(
    group=KUBERNETES_GROUP,
    finalizer=ann.KUBERNETES_FINALIZER,
    pod_claim_name_annotation=ann.KUBERNETES_POD_CLAIM_NAME_ANNOTATION,
    admin_access_label=ann.KUBERNETES_ADMIN_ACCESS_LABEL,
    claims_in_spec=True,
    claim_conditions=False,
    pins_node=True,
    extended_resources=True,
    allocates_ungated=True,
)
"""The in-tree kinds, as the kubelet, kube-scheduler and kube-controller-manager read them."""

PROTOCOLS: Final = {p.group: p for p in (DRALLOC, KUBERNETES)}


def protocol_for(group: str) -> PodProtocol:
    try:
        return PROTOCOLS[group]
    except KeyError:
        raise ValueError(f"API group {group!r}: expected one of {', '.join(PROTOCOLS)}") from None
