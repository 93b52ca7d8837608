"""A cluster snapshot: the typed objects the allocator needs, each with where it came from.

Objects of either API group (``resource.dralloc.dev/v1`` or in-tree ``resource.k8s.io/v1``)
are validated by ``operators.api.parse_object``; pods, nodes and namespaces are reduced to
the fields that matter for placement. Kinds that do not matter (Deployments, Services, ...)
are counted and skipped, so a whole ``kubectl get all -A -o yaml`` can be fed in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from operators.api import (
    DeviceClass,
    DeviceQuota,
    DeviceTaintRule,
    InvalidObjectError,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    parse_object,
    podgroup,
)
from operators.api.annotations import GangRef
from operators.api.podgroup import PodGroup, parse_pod_group
from operators.cache.core import Pod
from operators.scheduling.budgets import Budget, parse_budget
from operators.scheduling.model import Node, parse_node
from operators.toolkit.pods import gang_of, parse_pod
from operators.toolkit.sources import RawObject
from operators.toolkit.usererrors import ObjectRef, SnapshotError

DRA_KINDS = frozenset(
    {
        "DeviceClass",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "ResourceSlice",
        "DeviceTaintRule",
        "DeviceQuota",
    }
)
ADMIN_ACCESS_LABELS = ("resource.dralloc.dev/admin-access", "resource.kubernetes.io/admin-access")


@dataclass(frozen=True)
class NodeTaint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeEntry:
    """A node: its labels for selectors, its taints and whether it takes new pods."""

    ref: ObjectRef
    name: str
    labels: Mapping[str, str]
    taints: tuple[NodeTaint, ...] = ()
    unschedulable: bool = False
    body: Mapping[str, Any] = field(default_factory=dict)
    view: Node | None = None
    """What the scheduler's filters read (labels, taints, allocatable), from ``body``."""


@dataclass(frozen=True)
class Snapshot:
    """Everything read, keyed the way lookups need it."""

    device_classes: Mapping[str, DeviceClass]
    resource_slices: Mapping[str, ResourceSlice]
    claims: Mapping[str, ResourceClaim]
    """Keyed ``namespace/name``."""
    templates: Mapping[str, ResourceClaimTemplate]
    """Keyed ``namespace/name``."""
    taint_rules: Mapping[str, DeviceTaintRule]
    pods: Mapping[str, Pod]
    """Keyed ``namespace/name``."""
    nodes: Mapping[str, NodeEntry]
    admin_namespaces: frozenset[str]
    """Namespaces labelled for admin access."""
    namespaces: frozenset[str]
    """Every Namespace object seen (the admin-access check needs the namespace's labels)."""
    refs: Mapping[tuple[str, str], ObjectRef]
    """(kind, key) -> where the object came from."""
    api_groups: frozenset[str]
    skipped: Mapping[str, int]
    """Kinds that were read but play no part, with their counts."""
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    quotas: Mapping[str, DeviceQuota] = field(default_factory=dict)
    budgets: Mapping[str, Budget] = field(default_factory=dict)
    """PodDisruptionBudgets (policy/v1), keyed ``namespace/name``: which simulated evictions
    a budget would refuse."""
    """DeviceQuotas (dralloc's kind in either API group's snapshot), keyed ``namespace/name``."""
    pod_groups: Mapping[str, PodGroup] = field(default_factory=dict)
    """Upstream Workload API PodGroups (scheduling.k8s.io/v1beta1), keyed ``namespace/name``:
    the gangs of the pods that join them."""
    """Labels of every Namespace seen (inter-pod affinity namespace selectors read them)."""

    def gang_of(self, pod: Pod) -> tuple[GangRef | None, str]:
        """The pod's gang and why it cannot be decided ('' = it can), as the operator
        resolves it (see operators.toolkit.pods.gang_of)."""
        return gang_of(pod, self.pod_groups)

    def ref(self, kind: str, key: str) -> ObjectRef:
        return self.refs.get((kind, key), ObjectRef("snapshot", kind=kind, name=key))

    @property
    def node_names(self) -> list[str]:
        """Nodes of the snapshot; without Node objects, the nodes named by slices."""
        if self.nodes:
            return sorted(self.nodes)
        names = {s.spec.node_name for s in self.resource_slices.values() if s.spec.node_name}
        return sorted(n for n in names if n)

    def summary(self) -> str:
        parts = [
            f"{len(self.resource_slices)} ResourceSlices",
            f"{len(self.device_classes)} DeviceClasses",
            f"{len(self.claims)} ResourceClaims",
            f"{len(self.templates)} ResourceClaimTemplates",
            f"{len(self.taint_rules)} DeviceTaintRules",
            *([f"{len(self.quotas)} DeviceQuotas"] if self.quotas else []),
            *([f"{len(self.pod_groups)} PodGroups"] if self.pod_groups else []),
            f"{len(self.pods)} Pods",
            f"{len(self.nodes)} Nodes",
        ]
        return ", ".join(parts)


def build_snapshot(
    objects: Iterable[RawObject], *, on_invalid: Callable[[SnapshotError], None] | None = None
) -> Snapshot:
    """Validate and index raw objects; the first bad one raises SnapshotError.

    With ``on_invalid`` an object that does not validate (or repeats an earlier one) is
    reported to it and left out instead: a live cluster can hold an object the API server accepted but our models refuse,
    and one such object must not hide the answer for everything else.
    """
    classes: dict[str, DeviceClass] = {}
    slices: dict[str, ResourceSlice] = {}
    claims: dict[str, ResourceClaim] = {}
    templates: dict[str, ResourceClaimTemplate] = {}
    rules: dict[str, DeviceTaintRule] = {}
    quotas: dict[str, DeviceQuota] = {}
    budgets: dict[str, Budget] = {}
    pod_groups: dict[str, PodGroup] = {}
    pods: dict[str, Pod] = {}
    nodes: dict[str, NodeEntry] = {}
    admin_namespaces: set[str] = set()
    namespaces: set[str] = set()
    namespace_labels: dict[str, dict[str, str]] = {}
    refs: dict[tuple[str, str], ObjectRef] = {}
    groups: set[str] = set()
    skipped: Counter[str] = Counter()

    def remember(kind: str, key: str, ref: ObjectRef) -> None:
        earlier = refs.get((kind, key))
        if earlier is not None:
            raise SnapshotError(ref, f"duplicate object; first seen in {earlier.location}")
        refs[(kind, key)] = ref

    def add(raw: RawObject) -> None:
        kind, ref, body = raw.kind, raw.ref, raw.body
        if kind in DRA_KINDS:
            model = _parse_dra(raw)
            name = model.metadata.name or ""
            if isinstance(model, DeviceQuota):  # resource.dralloc.dev in both API modes
                key = f"{model.metadata.namespace or 'default'}/{name}"
                remember(kind, key, ref)
                quotas[key] = model
                return
            groups.add(raw.api_version.split("/")[0])
            if isinstance(model, DeviceClass):
                remember(kind, name, ref)
                classes[name] = model
            elif isinstance(model, ResourceSlice):
                remember(kind, name, ref)
                slices[name] = model
            elif isinstance(model, DeviceTaintRule):
                remember(kind, name, ref)
                rules[name] = model
            else:
                key = f"{model.metadata.namespace or 'default'}/{name}"
                remember(kind, key, ref)
                if isinstance(model, ResourceClaim):
                    claims[key] = model
                else:
                    templates[key] = model
        elif kind == "Pod" and raw.api_version == "v1":
            pod = parse_pod(ref, body)
            remember(kind, pod.ref, ref)
            pods[pod.ref] = pod
        elif kind == "PodDisruptionBudget" and raw.api_version == "policy/v1":
            budget = parse_budget(body)
            key = f"{budget.namespace}/{budget.name}"
            remember(kind, key, ref)
            budgets[key] = budget
        elif kind == podgroup.KIND and raw.api_version == f"{podgroup.GROUP}/{podgroup.VERSION}":
            group = parse_pod_group(body)
            key = f"{group.namespace or 'default'}/{group.name}"
            remember(kind, key, ref)
            pod_groups[key] = group
        elif kind == "Node" and raw.api_version == "v1":
            node = _parse_node(ref, body)
            remember(kind, node.name, ref)
            nodes[node.name] = node
        elif kind == "Namespace" and raw.api_version == "v1":
            meta = body.get("metadata") or {}
            labels = meta.get("labels") or {}
            namespaces.add(str(meta.get("name")))
            namespace_labels[str(meta.get("name"))] = {
                str(k): str(v) for k, v in (meta.get("labels") or {}).items()
            }
            if any(labels.get(label) == "true" for label in ADMIN_ACCESS_LABELS):
                admin_namespaces.add(str(meta.get("name")))
        else:
            skipped[kind] += 1

    for raw in objects:
        try:
            add(raw)
        except SnapshotError as error:
            if on_invalid is None:
                raise
            on_invalid(error)
    return Snapshot(
        device_classes=classes,
        resource_slices=slices,
        claims=claims,
        templates=templates,
        taint_rules=rules,
        quotas=quotas,
        budgets=budgets,
        pod_groups=pod_groups,
        pods=pods,
        nodes=nodes,
        admin_namespaces=frozenset(admin_namespaces),
        namespaces=frozenset(namespaces),
        namespace_labels=namespace_labels,
        refs=refs,
        api_groups=frozenset(groups),
        skipped=dict(skipped),
    )


def _parse_dra(raw: RawObject) -> Any:
    try:
        return parse_object(raw.body)
    except InvalidObjectError as exc:
        first = exc.errors[0] if exc.errors else None
        more = f" (and {len(exc.errors) - 1} more: " if len(exc.errors) > 1 else ""
        rest = "; ".join(str(e) for e in exc.errors[1:])
        message = (first.message if first else str(exc)) + (f"{more}{rest})" if more else "")
        raise SnapshotError(raw.ref, message, first.path if first else "") from exc


def _parse_node(ref: ObjectRef, body: Mapping[str, Any]) -> NodeEntry:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise SnapshotError(ref, "required value", "metadata.name")
    taints = []
    for i, taint in enumerate(spec.get("taints") or []):
        if not isinstance(taint, Mapping) or not taint.get("key") or not taint.get("effect"):
            raise SnapshotError(ref, "a taint needs key and effect", f"spec.taints[{i}]")
        taints.append(NodeTaint(str(taint["key"]), str(taint.get("value") or ""), taint["effect"]))
    return NodeEntry(
        ref=ref,
        name=name,
        labels=dict(meta.get("labels") or {}),
        taints=tuple(taints),
        unschedulable=bool(spec.get("unschedulable")),
        body=body,
        view=parse_node(body),
    )
