"""The two API modes of the operator, as the e2e tests see them.

dralloc runs on its own CRDs (``--api-group resource.dralloc.dev``, the default: mode
``crd``) or on the in-tree kinds (``--api-group resource.k8s.io``: mode ``in-tree``); see
docs/design.md "Two API modes". The kinds have the same schema in both groups; what differs is
where a pod asks for devices, where its claim statuses go, a few names, the testbed the mode
needs, and whether dralloc pins the pod to its node. An ``ApiMode`` holds exactly those
differences, so that one test body runs in both modes.

A test module opts in with ``pytestmark = pytest.mark.api_modes``; its tests then run once
per mode (ids ``crd`` and ``in-tree``) and ``testbed.api_mode`` is the mode (conftest.py).
A test about something only one mode has is marked
``@pytest.mark.only_api_modes("crd", reason=...)`` and is reported as skipped in the other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

DRALLOC_GROUP: Final = "resource.dralloc.dev"
"""dralloc's own group: its CRDs (crd mode), and in both modes the names of its pod protocol
that in-tree DRA has no equivalent for: the scheduling gate, the devices and allocated-by
annotations, the DevicesAllocated pod condition."""
KUBERNETES_GROUP: Final = "resource.k8s.io"

CLAIMS_ANNOTATION: Final = f"{DRALLOC_GROUP}/claims"
CLAIM_STATUSES_ANNOTATION: Final = f"{DRALLOC_GROUP}/claim-statuses"

# Testbed kinds (kube_helpers.TESTBED_KINDS says how each is started).
TESTBED_PLAIN: Final = "plain"
"""In-tree DRA off: kube-scheduler without its DynamicResources plugin, kcm without DRA
controllers."""
TESTBED_DRA: Final = "dra"
"""In-tree DRA on as ``testbed/up --dra`` starts it: kube-scheduler's plugin and kcm's DRA
controllers (dralloc beside them would run as allocator only)."""
TESTBED_DRA_SCHEDULER: Final = "dra-scheduler"
"""In-tree DRA with kube-scheduler's DynamicResources plugin on and kcm's resourceclaim and
device-taint-eviction controllers off, because dralloc replaces them."""
TESTBED_REAL_NODE_DRA: Final = "real-node-dra"
"""``dra`` plus one real node (kubelet, containerd, upstream's DRA test driver): in-tree DRA as
upstream ships it, on a node that runs containers."""
TESTBED_REAL_NODE: Final = "real-node"
"""``dra-scheduler`` plus one real node and the controllers that run the operator in-cluster
(Deployments, Jobs, service-account tokens, endpoints); dralloc replaces kcm's DRA controllers."""
TESTBED_PLAIN_WORKLOAD: Final = "plain-workload"
"""``plain`` serving upstream's Workload API (``testbed/up --workload-api``: PodGroups, the
GenericWorkload gate, so kube-scheduler gang-schedules PodGroups too)."""
TESTBED_DRA_SCHEDULER_WORKLOAD: Final = "dra-scheduler-workload"
"""``dra-scheduler`` serving upstream's Workload API, as ``plain-workload``."""
WITH_WORKLOAD_API: Final = {
    TESTBED_PLAIN: TESTBED_PLAIN_WORKLOAD,
    TESTBED_DRA_SCHEDULER: TESTBED_DRA_SCHEDULER_WORKLOAD,
}
"""A mode's testbed kind -> the same kind serving the Workload API (for PodGroup tests)."""


@dataclass(frozen=True)
class ApiMode:
    """What differs between the operator's API modes, for tests."""

    name: str
    """The test id: ``crd`` or ``in-tree``."""
    group: str
    """API group of DeviceClass, ResourceSlice, ResourceClaim(Template), DeviceTaintRule."""
    operator_args: tuple[str, ...]
    """Arguments of ``python -m operators`` that select the mode."""
    testbed_kind: str
    """Which testbed the mode runs on (TESTBED_*)."""
    crds: bool
    """Whether dralloc's CRDs must be installed (in-tree kinds are served by the API server)."""
    claims_in_annotation: bool
    """Pods ask for devices in the ``resource.dralloc.dev/claims`` annotation and get their
    claim statuses in ``resource.dralloc.dev/claim-statuses``; else in
    ``spec.resourceClaims`` and ``status.resourceClaimStatuses``."""
    finalizer: str
    """The claim finalizer held while a claim is allocated."""
    pod_claim_name_annotation: str
    """The annotation of a generated claim naming the pod's claim entry."""
    admin_access_label: str
    """The namespace label (value "true") adminAccess requests need."""
    api_server_checks_admin_access: bool
    """The API server itself refuses claims and templates with adminAccess in a namespace
    without that label (in-tree); dralloc's CRDs leave the check to dralloc."""
    pins_node: bool
    """dralloc pins a released pod to the node it chose with a required node affinity
    (``matchFields metadata.name``). Both modes do (in-tree, the claim's
    ``allocation.nodeSelector`` names the node too; see ``PodProtocol.pins_node`` for why
    that alone is not enough)."""
    claim_conditions: bool
    """ResourceClaim status has ``conditions`` (dralloc's ``Allocated`` condition, an extension
    of its CRD; resource.k8s.io/v1 has no such field)."""
    taint_rule_versions: tuple[str, ...]
    """The versions DeviceTaintRule may be served at, preferred first (in-tree it reached v1
    only in Kubernetes 1.37; 1.36 serves v1beta2 behind a gate, 1.33-1.35 v1alpha3)."""
    version: str = "v1"

    def __str__(self) -> str:
        return self.name

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def resource(self, plural: str) -> str:
        """The kubectl resource name of a DRA kind, e.g. ``resourceclaims.resource.k8s.io``."""
        return f"{plural}.{self.group}"

    @property
    def claim_statuses_field(self) -> str:
        """Where a pod's claim statuses are recorded, for messages."""
        return (
            f"annotation {CLAIM_STATUSES_ANNOTATION}"
            if self.claims_in_annotation
            else "status.resourceClaimStatuses"
        )

    def set_pod_claims(self, body: dict[str, Any], claims: Sequence[Mapping[str, Any]]) -> None:
        """Make the pod manifest ``body`` ask for ``claims`` (entries shaped like
        ``pod.spec.resourceClaims[]``), replacing what it asked for before."""
        entries = [dict(entry) for entry in claims]
        if self.claims_in_annotation:
            annotations = body.setdefault("metadata", {}).setdefault("annotations", {})
            annotations[CLAIMS_ANNOTATION] = json.dumps(entries)
        else:
            body.setdefault("spec", {})["resourceClaims"] = entries

    def pod_claims(self, body: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
        """The claim entries a pod (manifest or object) asks for; None when it asks nothing."""
        if self.claims_in_annotation:
            raw = (((body or {}).get("metadata") or {}).get("annotations") or {}).get(
                CLAIMS_ANNOTATION
            )
            return None if raw is None else list(json.loads(raw))
        found = ((body or {}).get("spec") or {}).get("resourceClaims")
        return None if found is None else list(found)

    def claim_statuses(self, pod: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
        """The pod's recorded claim statuses (``[{"name", "resourceClaimName"}]``), or None
        when none are recorded yet."""
        if self.claims_in_annotation:
            raw = (((pod or {}).get("metadata") or {}).get("annotations") or {}).get(
                CLAIM_STATUSES_ANNOTATION
            )
            return None if raw is None else list(json.loads(raw))
        found = ((pod or {}).get("status") or {}).get("resourceClaimStatuses")
        return None if found is None else list(found)


CRD: Final = ApiMode(
    name="crd",
    group=DRALLOC_GROUP,
    operator_args=(),  # the operator's default
    testbed_kind=TESTBED_PLAIN,
    crds=True,
    claims_in_annotation=True,
    finalizer=f"{DRALLOC_GROUP}/delete-protection",
    pod_claim_name_annotation=f"{DRALLOC_GROUP}/pod-claim-name",
    admin_access_label=f"{DRALLOC_GROUP}/admin-access",
    api_server_checks_admin_access=False,
    pins_node=True,
    claim_conditions=True,
    taint_rule_versions=("v1",),
)

IN_TREE: Final = ApiMode(
    name="in-tree",
    group=KUBERNETES_GROUP,
    operator_args=(f"--api-group={KUBERNETES_GROUP}",),
    testbed_kind=TESTBED_DRA_SCHEDULER,
    crds=False,
    claims_in_annotation=False,
    finalizer="resource.kubernetes.io/delete-protection",
    pod_claim_name_annotation="resource.kubernetes.io/pod-claim-name",
    admin_access_label="resource.kubernetes.io/admin-access",
    api_server_checks_admin_access=True,
    pins_node=True,
    claim_conditions=False,
    taint_rule_versions=("v1", "v1beta2", "v1alpha3"),
)

API_MODES: Final = (CRD, IN_TREE)
"""The modes a module marked ``api_modes`` runs in, in this order."""
